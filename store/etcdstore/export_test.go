package etcdstore

// SetTailHook makes AuditTail call f with the records (and their lines'
// bytes) it keeps, after each host it reads.
func SetTailHook(s *Store, f func(records, bytes int)) { s.tailHook = f }

// SetAfterImportTxn has Import call f after each of its transactions (f's
// error cuts the import off there): a migration caught midway.
func (s *Store) SetAfterImportTxn(f func(i int) error) { s.afterImportTxn = f }

// AbandonHostClaim stops keeping the host's claim alive without revoking
// it: the host killed.
func (s *Store) AbandonHostClaim() {
	s.host.mu.Lock()
	cancel := s.host.cancel
	s.host.cancel = nil
	s.host.mu.Unlock()
	cancel()
}
