package etcdstore

// SetTailHook makes AuditTail call f with the records (and their lines'
// bytes) it keeps, after each host it reads.
func SetTailHook(s *Store, f func(records, bytes int)) { s.tailHook = f }
