package rmqfake

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ProjectUsersFile is where the project keeps the users and ACLs of the real
// broker's auth proxy (conformance scenario t), relative to the repository
// root.
const ProjectUsersFile = "scripts/rocketmq/users.txt"

// WithProjectUsers adds, at start, the users and ACL entries of
// scripts/rocketmq/users.txt (see ParseUsers), found as WithProjectFixtures
// finds its file: the server then checks signatures and ACLs as the real
// broker's auth proxy does. New fails if the file is not found.
func WithProjectUsers() Option { return func(c *config) { c.projectUsers = true } }

// LoadUsers reads a users file (see ParseUsers) and returns its users and ACL
// entries as options.
func LoadUsers(path string) ([]Option, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	opts, err := ParseUsers(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return opts, nil
}

// ParseUsers reads users and ACL entries, one per line ('#' starts a
// comment), in the format scripts/rocketmq/Fixtures.java applies to the real
// broker (mqadmin createUser and createAcl):
//
//	user <name> <password> [super] [disabled]
//	acl <user> <resource>[,<resource>...] <action>[,<action>...] allow|deny [ip=<ip or CIDR>[,...]]
//
// An acl line must name a user of an earlier line; a password holds no
// space and no '#'. A file without a user line is refused: a server given
// it would check nothing. Errors name the line and never quote a user line
// past its name (a mistyped line may hold part of a password). It returns the
// users and entries as User and WithACL options.
func ParseUsers(r io.Reader) ([]Option, error) {
	var opts []Option
	var entries []ACLEntry
	users := map[string]bool{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "user":
			if len(f) < 3 {
				return nil, fmt.Errorf("line %d: want 'user <name> <password> [super] [disabled]'", n)
			}
			var uo []UserOption
			for _, flag := range f[3:] {
				switch flag {
				case "super":
					uo = append(uo, SuperUser())
				case "disabled":
					uo = append(uo, DisabledUser())
				default:
					return nil, fmt.Errorf("line %d: user %s: a field after the password is neither super nor disabled (a password holds no space)", n, f[1])
				}
			}
			users[f[1]] = true
			opts = append(opts, User(f[1], f[2], uo...))
		case "acl":
			if len(f) < 5 || (f[4] != "allow" && f[4] != "deny") {
				return nil, fmt.Errorf("line %d: want 'acl <user> <resources> <actions> allow|deny [ip=...]'", n)
			}
			if !users[f[1]] {
				return nil, fmt.Errorf("line %d: acl for %s: no such user above", n, f[1])
			}
			var ips []string
			for _, o := range f[5:] {
				v, ok := strings.CutPrefix(o, "ip=")
				if !ok || v == "" {
					return nil, fmt.Errorf("line %d: acl %s: unknown option %q (ip=...)", n, f[1], o)
				}
				if ips != nil {
					return nil, fmt.Errorf("line %d: acl %s: ip= given twice; list the addresses in one, comma-separated", n, f[1])
				}
				ips = strings.Split(v, ",")
			}
			var line []ACLEntry
			for _, res := range strings.Split(f[2], ",") {
				line = append(line, ACLEntry{User: f[1], Resource: res, Actions: strings.Split(f[3], ","), Deny: f[4] == "deny", SourceIPs: ips})
			}
			if _, err := parseACL(line); err != nil {
				return nil, fmt.Errorf("line %d: %w", n, err)
			}
			entries = append(entries, line...)
		default:
			return nil, fmt.Errorf("line %d: unknown kind %q: want user or acl", n, f[0])
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("no user line: a users file must define at least one user (a server given none would check no signature)")
	}
	if _, err := parseACL(entries); err != nil {
		return nil, err
	}
	return append(opts, WithACL(entries...)), nil
}

// projectFile finds rel (a path from the repository root) by walking up from
// the working directory.
func projectFile(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		path := filepath.Join(dir, filepath.FromSlash(rel))
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("rmqfake: %s not found above the working directory", rel)
		}
		dir = parent
	}
}
