"""What makes an acknowledged observation survive a crash: the write-ahead log, exactly-once sequence numbers, the live view's side log."""
