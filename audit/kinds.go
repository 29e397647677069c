package audit

// Kinds are the events of the log's records, each a kind of record: every
// record's Event is one of them (TestKindsAreEveryEvent holds the code to
// the list), and whatever shows records (the console) renders each.
var Kinds = []string{
	"exec.decision",    // an Exec request admitted or refused
	"exec.result",      // how an admitted command ended
	"exec.kill",        // a running command killed by a caller
	"approval.request", // a request waits for a human's approval
	"approval.decide",  // an approval approved or denied
	"call",             // a call refused before its method (not authenticated, no permission, a rate)
	"refusal.summary",  // refusals counted, not written one by one (a flood)
	"lockout", "unlock", "pause", "resume",
	EventLockoutRemote,        // a lockout another host took, in force here
	EventUnlockRemote,         // a lockout lifted by another host, lifted here
	EventResumeRemote,         // a pause lifted by another host, lifted here
	"relay", "relay.teardown", // a bridge's relayed request, and the end of its relay
	"key.issue", "key.rotate", // a sandbox's bridge key
	"git.fetch", "git.push", // the git proxy
	"policy.reload",     // a new policy, or one refused
	"lease.revoke",      // a lease an earlier run left, revoked
	"workspace.refused", // a workspace refused until repaired
	"workspace.repair",  // a workspace repaired
	EventCheckpoint,     // the head of a new file, with the stop state
	EventRepair,         // a torn last line cut
	EventStateRestore,   // the stop state restored from the log
	EventStateRebuild,   // the state file rebuilt from the log
	EventKey,            // a new checkpoint key made (a first start, or a lost state file)
	EventWitness,        // a witness that stopped taking checkpoints, or refused one, or took them again
}
