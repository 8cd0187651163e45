"""The command line's subcommands, one module per role; ``__main__.py`` builds the parser from them."""
