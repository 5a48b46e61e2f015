"""The reliability suite: what concurrent commands, hostile input and interrupted work can and cannot do."""
