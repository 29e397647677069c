package etcdstore

// SetAfterImportTxn has Import call f after each of its transactions (f's
// error cuts the import off there): a migration caught midway.
func (s *Store) SetAfterImportTxn(f func(i int) error) { s.afterImportTxn = f }
