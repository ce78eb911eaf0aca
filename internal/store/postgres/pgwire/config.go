package pgwire

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Config is a parsed DSN.
type Config struct {
	Hosts    []Host
	User     string
	Password string
	Database string
	// Params are sent at start-up (application_name, search_path, …).
	Params map[string]string
	// SSLMode is disable, allow, prefer, require, verify-ca or verify-full.
	SSLMode string
	// TLS is the client configuration for require and stricter (nil
	// otherwise); prefer and allow use it without verification.
	TLS            *tls.Config
	ConnectTimeout time.Duration
	// MaxRow bounds a data row the server sends (default DefaultMaxRow).
	MaxRow int
	noSNI  bool // sslsni=0

	// OnNotification, if set, is called with every notification, on the
	// goroutine reading the connection.
	OnNotification func(*Notification)
}

// Host is one server to try, a unix socket directory when Host starts
// with '/'.
type Host struct {
	Host string
	Port uint16
}

// Copy returns a copy of c whose maps and slices are its own.
func (c *Config) Copy() *Config {
	d := *c
	d.Hosts = append([]Host(nil), c.Hosts...)
	d.Params = make(map[string]string, len(c.Params))
	for k, v := range c.Params {
		d.Params[k] = v
	}
	if c.TLS != nil {
		d.TLS = c.TLS.Clone()
	}
	return &d
}

// envDefaults maps the libpq environment variables to their parameters.
var envDefaults = [][2]string{
	{"PGHOST", "host"},
	{"PGPORT", "port"},
	{"PGDATABASE", "dbname"},
	{"PGUSER", "user"},
	{"PGPASSWORD", "password"},
	{"PGPASSFILE", "passfile"},
	{"PGAPPNAME", "application_name"},
	{"PGCONNECT_TIMEOUT", "connect_timeout"},
	{"PGSSLMODE", "sslmode"},
	{"PGSSLROOTCERT", "sslrootcert"},
	{"PGSSLCERT", "sslcert"},
	{"PGSSLKEY", "sslkey"},
	{"PGSSLSNI", "sslsni"},
	{"PGOPTIONS", "options"},
	{"PGTZ", "timezone"},
}

// refused are libpq parameters this client does not implement: a DSN
// naming one is refused rather than connecting otherwise than asked.
var refused = map[string]string{
	"service":              "connection service files are not supported",
	"servicefile":          "connection service files are not supported",
	"sslpassword":          "encrypted client keys are not supported",
	"sslcrl":               "certificate revocation lists are not supported",
	"krbsrvname":           "Kerberos is not supported",
	"gsslib":               "GSSAPI is not supported",
	"requirepeer":          "requirepeer is not supported",
	"channel_binding":      "channel binding is not supported",
	"load_balance_hosts":   "load_balance_hosts is not supported",
	"replication":          "replication connections are not supported",
	"hostaddr":             "hostaddr is not supported: name the address in host",
	"target_session_attrs": "target_session_attrs other than any is not supported",
}

// ParseConfig parses a libpq DSN: a postgres:// (or postgresql://) URL or
// key=value pairs, with the libpq environment variables (PGHOST,
// PGPASSWORD, …) as defaults and the password file (~/.pgpass, PGPASSFILE)
// when the DSN names no password. Its errors never quote a value.
func ParseConfig(dsn string) (*Config, error) {
	settings := map[string]string{}
	for _, e := range envDefaults {
		if v := os.Getenv(e[0]); v != "" {
			settings[e[1]] = v
		}
	}
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		err = parseURL(dsn, settings)
	} else {
		err = parseKeyValue(dsn, settings)
	}
	if err != nil {
		return nil, err
	}
	return configFrom(settings)
}

func parseURL(dsn string, settings map[string]string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return errors.New("malformed URL")
	}
	if u.User != nil {
		settings["user"] = u.User.Username()
		if p, ok := u.User.Password(); ok {
			settings["password"] = p
		}
	}
	// Several hosts: host1:port1,host2:port2.
	var hosts, ports []string
	for _, hp := range strings.Split(u.Host, ",") {
		if hp == "" {
			continue
		}
		h, p, err := net.SplitHostPort(hp)
		if err != nil {
			h, p = strings.Trim(hp, "[]"), ""
		}
		hosts, ports = append(hosts, h), append(ports, p)
	}
	if len(hosts) > 0 {
		settings["host"] = strings.Join(hosts, ",")
		settings["port"] = strings.Join(ports, ",")
	}
	if db := strings.TrimPrefix(u.Path, "/"); db != "" {
		settings["dbname"] = db
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return errors.New("malformed URL query")
	}
	for k, v := range q {
		settings[k] = v[len(v)-1]
	}
	return nil
}

func parseKeyValue(dsn string, settings map[string]string) error {
	s := strings.TrimSpace(dsn)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return errors.New("want key=value pairs")
		}
		key := strings.TrimSpace(s[:eq])
		if key == "" {
			return errors.New("empty key")
		}
		s = strings.TrimLeft(s[eq+1:], " \t\n\r")
		var val strings.Builder
		if strings.HasPrefix(s, "'") {
			s = s[1:]
			for {
				if s == "" {
					return fmt.Errorf("unterminated quoted value of %s", key)
				}
				c := s[0]
				s = s[1:]
				if c == '\'' {
					break
				}
				if c == '\\' && s != "" {
					c, s = s[0], s[1:]
				}
				val.WriteByte(c)
			}
		} else {
			for s != "" && !strings.ContainsRune(" \t\n\r", rune(s[0])) {
				c := s[0]
				s = s[1:]
				if c == '\\' && s != "" {
					c, s = s[0], s[1:]
				}
				val.WriteByte(c)
			}
		}
		settings[key] = val.String()
		s = strings.TrimLeft(s, " \t\n\r")
	}
	return nil
}

// defaultHost is libpq's: the usual unix socket directories, else
// localhost.
func defaultHost() string {
	for _, d := range []string{"/var/run/postgresql", "/private/tmp", "/tmp"} {
		if _, err := os.Stat(filepath.Join(d, ".s.PGSQL.5432")); err == nil {
			return d
		}
	}
	return "localhost"
}

func configFrom(s map[string]string) (*Config, error) {
	c := &Config{Params: map[string]string{}, SSLMode: "prefer", MaxRow: DefaultMaxRow}
	for k, why := range refused {
		if v, ok := s[k]; ok {
			if k == "target_session_attrs" && (v == "any" || v == "") {
				continue
			}
			return nil, fmt.Errorf("parameter %s: %s", k, why)
		}
	}
	if m := s["gssencmode"]; m == "require" {
		return nil, errors.New("gssencmode=require: GSSAPI encryption is not supported")
	}
	c.User = s["user"]
	if c.User == "" {
		if u, err := user.Current(); err == nil {
			c.User = u.Username
		}
	}
	c.Database = s["dbname"]
	if c.Database == "" {
		c.Database = c.User
	}
	host := s["host"]
	if host == "" {
		host = defaultHost()
	}
	hosts := strings.Split(host, ",")
	ports := strings.Split(s["port"], ",")
	if len(ports) != 1 && len(ports) != len(hosts) {
		return nil, errors.New("as many ports as hosts, or one, are needed")
	}
	for i, h := range hosts {
		p := ports[0]
		if len(ports) > 1 {
			p = ports[i]
		}
		port := uint64(5432)
		if p != "" {
			var err error
			if port, err = strconv.ParseUint(p, 10, 16); err != nil || port == 0 {
				return nil, errors.New("invalid port")
			}
		}
		if h == "" {
			h = defaultHost()
		}
		c.Hosts = append(c.Hosts, Host{h, uint16(port)})
	}
	if t := s["connect_timeout"]; t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 {
			return nil, errors.New("invalid connect_timeout")
		}
		c.ConnectTimeout = time.Duration(n) * time.Second
	}
	if m := s["sslmode"]; m != "" {
		c.SSLMode = m
	}
	if err := c.configureTLS(s); err != nil {
		return nil, err
	}
	pw, ok := s["password"]
	if !ok {
		pw = passfile(s["passfile"], c)
	}
	c.Password = pw
	for k, v := range s {
		switch k {
		case "host", "port", "dbname", "user", "password", "passfile", "connect_timeout",
			"sslmode", "sslrootcert", "sslcert", "sslkey", "sslsni", "gssencmode", "target_session_attrs":
		default:
			c.Params[k] = v
		}
	}
	if _, ok := c.Params["client_encoding"]; !ok {
		c.Params["client_encoding"] = "UTF8"
	}
	return c, nil
}

func (c *Config) configureTLS(s map[string]string) error {
	switch c.SSLMode {
	case "disable", "allow", "prefer", "require", "verify-ca", "verify-full":
	default:
		return errors.New("invalid sslmode: want disable, allow, prefer, require, verify-ca or verify-full")
	}
	if c.SSLMode == "disable" {
		return nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	mode := c.SSLMode
	root := s["sslrootcert"]
	if mode == "require" && root != "" {
		mode = "verify-ca" // as libpq does when a root certificate is named
	}
	switch mode {
	case "allow", "prefer", "require":
		cfg.InsecureSkipVerify = true // encryption only, as libpq does
	case "verify-ca", "verify-full":
		if root != "system" {
			if root == "" {
				if home, err := os.UserHomeDir(); err == nil {
					root = filepath.Join(home, ".postgresql", "root.crt")
				}
			}
			pem, err := os.ReadFile(root)
			if err != nil {
				return fmt.Errorf("sslmode=%s: reading the root certificate: %w", c.SSLMode, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return fmt.Errorf("sslmode=%s: no certificate in %s", c.SSLMode, root)
			}
			cfg.RootCAs = pool
		}
		if mode == "verify-ca" {
			// Verify the chain, not the name.
			cfg.InsecureSkipVerify = true
			roots := cfg.RootCAs
			cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
				return verifyChain(raw, roots)
			}
		}
	}
	cert, key := s["sslcert"], s["sslkey"]
	if cert != "" || key != "" {
		if cert == "" || key == "" {
			return errors.New("sslcert and sslkey go together")
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	c.TLS = cfg
	c.noSNI = s["sslsni"] == "0"
	return nil
}

func verifyChain(raw [][]byte, roots *x509.CertPool) error {
	if len(raw) == 0 {
		return errors.New("the server sent no certificate")
	}
	certs := make([]*x509.Certificate, len(raw))
	for i, r := range raw {
		c, err := x509.ParseCertificate(r)
		if err != nil {
			return err
		}
		certs[i] = c
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	_, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
	return err
}

// passfile returns the password of the first line of the password file
// (libpq's format: host:port:database:user:password, * matching anything)
// matching c's first host, or "". A file others may read is ignored, as
// libpq does.
func passfile(path string, c *Config) string {
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		path = filepath.Join(home, ".pgpass")
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o077 != 0 {
		return ""
	}
	host, port := "localhost", "5432"
	if len(c.Hosts) > 0 {
		if !strings.HasPrefix(c.Hosts[0].Host, "/") {
			host = c.Hosts[0].Host
		}
		port = strconv.Itoa(int(c.Hosts[0].Port))
	}
	want := []string{host, port, c.Database, c.User}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		fields := splitPassLine(line)
		if len(fields) != 5 {
			continue
		}
		ok := true
		for i, w := range want {
			if fields[i] != "*" && fields[i] != w {
				ok = false
				break
			}
		}
		if ok {
			return fields[4]
		}
	}
	return ""
}

// splitPassLine splits a password file line on ':' with '\' escaping.
func splitPassLine(line string) []string {
	var fields []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		switch ch := line[i]; {
		case ch == '\\' && i+1 < len(line):
			i++
			cur.WriteByte(line[i])
		case ch == ':' && len(fields) < 4:
			fields = append(fields, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(ch)
		}
	}
	return append(fields, cur.String())
}
