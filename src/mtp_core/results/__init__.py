"""Result records: `write` (the record every step writes) and `read` (result files read back, checked)."""
