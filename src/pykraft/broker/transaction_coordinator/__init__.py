"""The transaction coordinator: `__transaction_state` records and the sans-I/O core."""
