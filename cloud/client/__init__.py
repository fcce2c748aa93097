"""What the client subcommands of `strata cloud` share: channel, store file, clip download."""
