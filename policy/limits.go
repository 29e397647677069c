package policy

import (
	"time"

	"coily.dev/coily/sandbox"
)

// limitsFileFields are the resource limits, as written under the policy's
// top-level `limits:` (defaults for every rule) and a rule's `limits:`.
type limitsFileFields struct {
	Memory    string `yaml:"memory"`
	Processes int64  `yaml:"processes"`
	OpenFiles int64  `yaml:"open_files"`
	FileSize  string `yaml:"file_size"`
	CPU       string `yaml:"cpu"`
	Tmp       string `yaml:"tmp"`
	Shm       string `yaml:"shm"`
}

// resourceLimits reads limits written at key (a path for error positions)
// over base: fields left out keep base's value.
func (b *builder) resourceLimits(base sandbox.Limits, f *limitsFileFields, key ...any) sandbox.Limits {
	if f == nil {
		return base
	}
	l := base
	size := func(field, s string, into *int64) {
		if s == "" {
			return
		}
		v, err := ParseSize(s)
		if err != nil {
			b.failAt(b.at(append(key, field)...), "limits.%s: %v", field, err)
			return
		}
		*into = v
	}
	size("memory", f.Memory, &l.Memory)
	size("file_size", f.FileSize, &l.FileSize)
	size("tmp", f.Tmp, &l.Tmp)
	size("shm", f.Shm, &l.Shm)
	if f.Processes != 0 {
		l.Processes = f.Processes
	}
	if f.OpenFiles != 0 {
		l.OpenFiles = f.OpenFiles
	}
	if f.CPU != "" {
		d, err := time.ParseDuration(f.CPU)
		if err != nil || d < time.Second || d > MaxTimeout {
			b.failAt(b.at(append(key, "cpu")...), "limits.cpu %q must be a duration between 1s and %s", f.CPU, MaxTimeout)
		}
		l.CPU = d
	}
	if f.Processes < 0 || f.Processes > 1<<20 || f.OpenFiles < 0 || f.OpenFiles > 1<<20 {
		b.failAt(b.at(key...), "limits: processes and open_files must be between 8 and 1048576")
	}
	if err := l.Check(); err != nil {
		b.failAt(b.at(key...), "limits: %v", err)
	}
	return l
}

// ruleWritable reads `writable:`, the protected names the rule's command
// may write (sandbox.WritableNames).
func (b *builder) ruleWritable(r *Rule, rf ruleFile, rn ruleNode) {
	for j, name := range rf.Writable {
		if err := sandbox.CheckWritable([]string{name}); err != nil {
			b.failAt(b.at("commands", ruleIndex(b, rn), "writable", j), "rule %q: %v", r.Name, err)
		}
	}
	r.Writable = rf.Writable
}

// concurrency reads the server-wide and per-principal caps on commands
// running at once.
func (b *builder) concurrency(p *Policy, f *limitsFile) {
	if c := f.Concurrency; c != nil {
		if *c < 1 || *c > MaxConcurrency {
			b.failAt(b.at("limits", "concurrency"), "limits.concurrency must be between 1 and %d, got %d", MaxConcurrency, *c)
		}
		p.concurrency = *c
	}
	p.perPrincipal = DefaultPerPrincipal(p.concurrency)
	if c := f.PerPrincipal; c != nil {
		if *c < 1 || *c > p.concurrency {
			b.failAt(b.at("limits", "per_principal"), "limits.per_principal must be between 1 and limits.concurrency (%d), got %d", p.concurrency, *c)
		}
		p.perPrincipal = *c
	}
}

// DefaultPerPrincipal is limits.per_principal when the policy leaves it
// out: every slot but one, so that one principal can never take them all
// while a lone principal loses as little as possible (with one slot, that
// slot).
func DefaultPerPrincipal(concurrency int) int { return max(1, concurrency-1) }
