"""The group coordinator: consumer groups and committed offsets (`__consumer_offsets`).

`core` is the sans-I/O state machine, `records` the `__consumer_offsets` record codec,
`state` the classic group's transition table and `shell` the asyncio shell around them.
"""
