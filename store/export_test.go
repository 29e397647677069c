package store

// PageWrites is the count of pages d has written (bbolt's own count,
// which a commit that changed nothing still adds to): the contract suite's
// storetest.Writes.
func PageWrites(d *DB) int64 { s := d.db.Stats(); return s.TxStats.GetWrite() }
