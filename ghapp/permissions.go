package ghapp

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Permissions maps a GitHub App permission to its level ("read" or
// "write").
type Permissions map[string]string

// String lists the permissions as "name:level" pairs, sorted, comma
// separated (the form audit records carry).
func (p Permissions) String() string {
	parts := make([]string, 0, len(p))
	for _, k := range slices.Sorted(maps.Keys(p)) {
		parts = append(parts, k+":"+p[k])
	}
	return strings.Join(parts, ",")
}

// RepositoryPermissions are the permissions GitHub grants on a
// repository (the "Repository permissions" of a GitHub App). A token
// scoped to one repository may carry only these: organization and
// account permissions reach beyond the repository.
var RepositoryPermissions = []string{
	"actions", "administration", "attestations", "checks", "code_scanning_alerts", "codespaces", "contents",
	"custom_properties_for_repositories", "dependabot_secrets", "deployments", "discussions", "environments", "issues",
	"merge_queues", "metadata", "packages", "pages", "pull_requests", "repository_advisories",
	"repository_custom_properties", "repository_hooks", "repository_projects", "secret_scanning_alerts",
	"secrets", "security_events", "single_file", "statuses", "vulnerability_alerts", "workflows",
}

// metadata is the permission GitHub adds, at read, to every installation
// token.
const metadata = "metadata"

// levels orders the levels a permission may be asked for.
var levels = map[string]int{"read": 1, "write": 2}

// CheckPermission reports why name: level cannot be asked for, or nil.
func CheckPermission(name, level string) error {
	if !slices.Contains(RepositoryPermissions, name) {
		return fmt.Errorf("%q is not a repository permission of a GitHub App (one of %s)", name, strings.Join(RepositoryPermissions, ", "))
	}
	if levels[level] == 0 {
		return fmt.Errorf("permission %s: level %q must be read or write", name, level)
	}
	return nil
}

// beyond lists what granted holds beyond asked: a permission not asked
// for (but metadata: read, which GitHub adds to every token), or at a
// higher level than asked, or at a level this package does not know.
func beyond(granted, asked Permissions) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(granted)) {
		g := granted[k]
		switch a, ok := asked[k]; {
		case !ok && k == metadata && g == "read":
		case !ok:
			out = append(out, k+":"+g)
		case levels[g] == 0 || levels[g] > levels[a]:
			out = append(out, k+":"+g)
		}
	}
	return out
}
