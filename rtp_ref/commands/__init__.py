"""One module per ``rtp-ref`` subcommand; each is a thin call into one room of rtp_ref."""
