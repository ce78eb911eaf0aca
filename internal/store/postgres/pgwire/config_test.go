package pgwire

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// clearEnv unsets the libpq environment for the test.
func clearEnv(t *testing.T) {
	t.Helper()
	for _, e := range envDefaults {
		t.Setenv(e[0], "")
	}
	t.Setenv("HOME", t.TempDir()) // no ~/.pgpass
}

func TestParseConfig(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		dsn  string
		want Config
	}{
		{"postgres://u:p%40ss@db.example:6543/app?sslmode=disable&application_name=x&search_path=s1",
			Config{Hosts: []Host{{"db.example", 6543}}, User: "u", Password: "p@ss", Database: "app", SSLMode: "disable",
				Params: map[string]string{"application_name": "x", "search_path": "s1", "client_encoding": "UTF8"}}},
		{"postgresql://u@h1:1,h2:2/d?sslmode=disable&connect_timeout=3",
			Config{Hosts: []Host{{"h1", 1}, {"h2", 2}}, User: "u", Database: "d", SSLMode: "disable", ConnectTimeout: 3 * time.Second,
				Params: map[string]string{"client_encoding": "UTF8"}}},
		{"postgres://u@[::1]/d?sslmode=disable",
			Config{Hosts: []Host{{"::1", 5432}}, User: "u", Database: "d", SSLMode: "disable", Params: map[string]string{"client_encoding": "UTF8"}}},
		{`host=/run/pg port=5433 user=u password='it\'s a\\'  dbname=d sslmode=disable options='-c x=y'`,
			Config{Hosts: []Host{{"/run/pg", 5433}}, User: "u", Password: `it's a\`, Database: "d", SSLMode: "disable",
				Params: map[string]string{"options": "-c x=y", "client_encoding": "UTF8"}}},
		{"host=h user=u sslmode=disable client_encoding=LATIN1",
			Config{Hosts: []Host{{"h", 5432}}, User: "u", Database: "u", SSLMode: "disable", Params: map[string]string{"client_encoding": "LATIN1"}}},
	}
	for _, tc := range tests {
		t.Run(tc.dsn, func(t *testing.T) {
			got, err := ParseConfig(tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			tc.want.MaxRow = DefaultMaxRow
			got.TLS = nil
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("ParseConfig:\n got %+v\nwant %+v", *got, tc.want)
			}
		})
	}
}

func TestParseConfigEnvironment(t *testing.T) {
	clearEnv(t)
	t.Setenv("PGHOST", "envhost")
	t.Setenv("PGUSER", "envuser")
	t.Setenv("PGPASSWORD", "envpw")
	t.Setenv("PGSSLMODE", "disable")
	c, err := ParseConfig("dbname=d")
	if err != nil {
		t.Fatal(err)
	}
	if c.Hosts[0].Host != "envhost" || c.User != "envuser" || c.Password != "envpw" || c.SSLMode != "disable" {
		t.Errorf("the environment was not read: %+v", c)
	}
	// The DSN wins.
	if c, err = ParseConfig("postgres://u:dsnpw@h/d?sslmode=require"); err != nil {
		t.Fatal(err)
	}
	if c.User != "u" || c.Password != "dsnpw" || c.SSLMode != "require" || !c.TLS.InsecureSkipVerify {
		t.Errorf("the environment overrode the DSN: %+v", c)
	}
}

func TestParseConfigRefused(t *testing.T) {
	clearEnv(t)
	for _, dsn := range []string{
		"postgres://u:s3cret@h/d?sslmode=bogus",
		"host=h password=s3cret sslmode=bogus",
		"host=h password=s3cret port=99999",
		"host=h password=s3cret service=x",
		"host=h password=s3cret target_session_attrs=read-write",
		"host=h password=s3cret sslmode=verify-full sslrootcert=/nonexistent",
		"host=h password='s3cret",
		"postgres://u:s3cret@h/d?connect_timeout=x",
		"host=h,i port=1,2,3 password=s3cret",
	} {
		_, err := ParseConfig(dsn)
		if err == nil {
			t.Errorf("ParseConfig(%q) succeeded", dsn)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseConfig(%q) error shows the password: %v", dsn, err)
		}
	}
}

func TestPassfile(t *testing.T) {
	clearEnv(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "pgpass")
	content := "# comment\nother:*:*:*:wrong\nh:5432:d:u:pa\\:ss\n*:*:*:*:fallback\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PGPASSFILE", path)
	tests := []struct{ dsn, want string }{
		{"host=h user=u dbname=d sslmode=disable", "pa:ss"},
		{"host=h user=v dbname=d sslmode=disable", "fallback"},
		{"host=h user=u dbname=d password=given sslmode=disable", "given"},
	}
	for _, tc := range tests {
		c, err := ParseConfig(tc.dsn)
		if err != nil {
			t.Fatal(err)
		}
		if c.Password != tc.want {
			t.Errorf("%s: password %q, want %q", tc.dsn, c.Password, tc.want)
		}
	}
	// A file others may read is ignored, as libpq does.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := ParseConfig("host=h user=u dbname=d sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	if c.Password != "" {
		t.Errorf("a world-readable password file was used")
	}
}
