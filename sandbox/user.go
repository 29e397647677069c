package sandbox

import (
	"errors"
	"fmt"
	"os/user"
	"strconv"
	"sync"
)

// User is the host user a root process runs its sandboxes as: a root
// server never lends root's credentials to a command (the sandbox would own
// every root-only file it can see, and the kernel exempts root from
// RLIMIT_NPROC). The zero User means "not chosen": DefaultUser.
type User struct {
	// Name is the user's name in the host's user database, "" for a uid
	// it does not list.
	Name string
	// UID and GID are the host ids the sandbox's processes have; they have
	// no supplementary groups.
	UID, GID int
}

// DefaultUserName is the user a root process runs its sandboxes as unless
// told otherwise (--sandbox-user).
const DefaultUserName = "nobody"

// nobodyID is the conventional id of nobody (and nogroup), used when the
// host's user database has no "nobody".
const nobodyID = 65534

// maxUserID bounds a user or group id: (uid_t)-1 means "no change" to the
// kernel, and the overflow ids are not real users.
const maxUserID = 1<<32 - 2

// maxUserName bounds a user name (useradd's own limit is 32).
const maxUserName = 64

// IsZero reports whether u was not chosen.
func (u User) IsZero() bool { return u == User{} }

// String names the user for messages: "uid 65534 (nobody), gid 65534".
func (u User) String() string {
	if u.Name != "" {
		return fmt.Sprintf("uid %d (%s), gid %d", u.UID, u.Name, u.GID)
	}
	return fmt.Sprintf("uid %d, gid %d", u.UID, u.GID)
}

// Check refuses a user that would give the sandbox root's files: uid 0 or
// a primary group 0, or ids the kernel cannot take.
func (u User) Check() error {
	switch {
	case u.UID == 0:
		return errors.New("the sandbox's user may not be root (uid 0): a root server runs sandboxes as an unprivileged user so that they cannot read root's files")
	case u.GID == 0:
		return fmt.Errorf("the sandbox's user %s has group 0 (root's) as its primary group: its sandboxes could read files of group root; choose a user of its own group", u)
	case u.UID < 0 || u.UID > maxUserID || u.GID < 0 || u.GID > maxUserID:
		return fmt.Errorf("the sandbox's user %s has an id out of range", u)
	}
	return nil
}

// ParseUser reads a --sandbox-user value: a user name of the host's user
// database, or a numeric uid (its primary group from the database when it
// lists the uid, else the group of the same number). Root, group 0 and
// anything unknown are refused.
func ParseUser(spec string) (User, error) {
	if spec == "" {
		return User{}, errors.New("empty sandbox user: give a user name or a numeric uid")
	}
	if allDigits(spec) {
		return parseUID(spec)
	}
	if err := checkUserName(spec); err != nil {
		return User{}, err
	}
	pw, err := user.Lookup(spec)
	if err != nil {
		return User{}, fmt.Errorf("sandbox user %q: %w", spec, err)
	}
	return fromPasswd(pw)
}

// parseUID reads a numeric uid.
func parseUID(spec string) (User, error) {
	if len(spec) > 10 || len(spec) > 1 && spec[0] == '0' {
		return User{}, fmt.Errorf("sandbox user %q is not a valid uid", spec)
	}
	uid, err := strconv.ParseUint(spec, 10, 32)
	if err != nil || uid > maxUserID {
		return User{}, fmt.Errorf("sandbox user %q is not a valid uid", spec)
	}
	u := User{UID: int(uid), GID: int(uid)}
	if pw, err := user.LookupId(spec); err == nil {
		return fromPasswd(pw)
	}
	return u, u.Check()
}

// fromPasswd converts a user database entry.
func fromPasswd(pw *user.User) (User, error) {
	uid, err1 := strconv.Atoi(pw.Uid)
	gid, err2 := strconv.Atoi(pw.Gid)
	if err := errors.Join(err1, err2); err != nil {
		return User{}, fmt.Errorf("sandbox user %q: unreadable ids: %w", pw.Username, err)
	}
	u := User{Name: pw.Username, UID: uid, GID: gid}
	return u, u.Check()
}

// checkUserName accepts the portable user name characters only.
func checkUserName(s string) error {
	if len(s) > maxUserName || s[0] == '-' {
		return fmt.Errorf("sandbox user %q is not a valid user name", s)
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.'
		if !ok {
			return fmt.Errorf("sandbox user %q is not a valid user name", s)
		}
	}
	return nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// defaultUser is DefaultUser, looked up once.
var defaultUser = sync.OnceValue(func() User {
	if u, err := ParseUser(DefaultUserName); err == nil {
		return u
	}
	return User{Name: DefaultUserName, UID: nobodyID, GID: nobodyID}
})

// DefaultUser is "nobody" from the host's user database, or uid and gid
// 65534 when it has none.
func DefaultUser() User { return defaultUser() }

// AccessError is a path the sandbox's user (a root caller's: see
// Profile.User) cannot use: a writable root it cannot write, or a path it
// cannot reach because a directory on the way is not searchable by it
// (bubblewrap, which runs as that user, binds what it is given by path).
type AccessError struct {
	// What the path is for ("workspace", "the egress proxy's socket", …),
	// Path the path itself.
	What, Path string
	// Dir is the directory in the way: Path when it is not writable,
	// else the directory on its way that is not searchable; UID, GID and
	// Mode are its owner and permission bits.
	Dir      string
	UID, GID int
	Mode     uint32
	// Write: Dir is Path, which the user must write and cannot.
	Write bool
	User  User
}

func (e *AccessError) Error() string {
	owner := "uid " + strconv.Itoa(e.UID)
	if pw, err := user.LookupId(strconv.Itoa(e.UID)); err == nil {
		owner += " (" + pw.Username + ")"
	}
	how := "or run coily as an unprivileged user (docs/sandbox.md, \"A server running as root\")"
	if e.Write {
		return fmt.Sprintf("%v: %s %s is owned by %s, gid %d, mode %04o, and the sandbox's user, %s, cannot write it: "+
			"coily running as root runs every sandbox as that user, never as root. Give it to that user (chown -R %d:%d %s), %s",
			ErrUnavailable, e.What, e.Path, owner, e.GID, e.Mode, e.User, e.User.UID, e.User.GID, e.Path, how)
	}
	return fmt.Sprintf("%v: %s %s cannot be reached by the sandbox's user, %s: the directory %s (owned by %s, gid %d, mode %04o) "+
		"is not searchable by it, and bubblewrap, running as that user, binds what it is given by path. "+
		"Make the directories on the way searchable (chmod o+x %s), move it, %s",
		ErrUnavailable, e.What, e.Path, e.User, e.Dir, owner, e.GID, e.Mode, e.Dir, how)
}

// Unwrap makes the error an ErrUnavailable.
func (e *AccessError) Unwrap() error { return ErrUnavailable }
