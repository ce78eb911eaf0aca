package store

import (
	"net/url"
	"regexp"
	"strings"
	"sync"
)

var kvPassword = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`) })

// RedactDSN returns a store's connection string with its password replaced,
// for logs and errors: the password of a URL's user info and of any query
// parameter whose name says password, or a key=value string's password. A
// URL (of any scheme) that does not parse is not shown at all.
func RedactDSN(dsn string) string {
	if strings.Contains(dsn, "://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "(unparsable URL)"
		}
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
		}
		q := u.Query()
		for k := range q {
			if strings.Contains(strings.ToLower(k), "password") {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
		return u.String()
	}
	return kvPassword().ReplaceAllString(dsn, "${1}xxxxx")
}
