"""The group coordinator: consumer groups and committed offsets (`__consumer_offsets`).

`core` is the sans-I/O state machine, `records` the `__consumer_offsets` record codec,
`state` the classic group's transition table, `consumer` the KIP-848 consumer group (epochs,
assignors, reconciliation), `consumer_records` its records and replay, and `shell` the
asyncio shell around them.
"""
