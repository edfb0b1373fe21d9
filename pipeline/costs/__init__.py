"""Money: the dated price table (``prices.toml``) and what a call costs."""
