package console

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"coily.dev/coily/attach/gitcredentials"
	"coily.dev/coily/attach/githubapp"
	"coily.dev/coily/attach/sshkeys"
	"coily.dev/coily/policy"
)

// ruleCredentials are what a rule's command is given credentials
// through, for the approver: each variable that gets one, each host git's
// credential helper answers for, each ssh key's hosts and the GitHub App
// token's repository, permissions and variables. Names and hosts, never a
// reference or a value.
func ruleCredentials(r *policy.Rule) []string {
	out := []string{}
	for _, name := range slices.Sorted(maps.Keys(r.Credentials)) {
		out = append(out, "env "+name)
	}
	for _, g := range gitcredentials.Of(r) {
		out = append(out, "git credential helper for https://"+g.Address())
	}
	for _, k := range sshkeys.Of(r) {
		out = append(out, "ssh agent key for "+k.HostList())
	}
	if g := githubapp.Of(r); g != nil {
		repo := g.Repository.String()
		if g.Repository.Name == "" {
			repo = "the repository of " + strings.Join(g.RepositoryFrom, " or ")
		}
		out = append(out, fmt.Sprintf("GitHub App token for %s (%s) as %s", repo, g.Permissions, strings.Join(g.Env, ", ")))
	}
	return texts(out)
}
