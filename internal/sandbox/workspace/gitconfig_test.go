package workspace

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// gitConfigList is what the real git reads from data: its entries, or
// ok=false when git rejects the file. found is false without git.
func gitConfigList(t testing.TB, data []byte) (entries []configEntry, ok, found bool) {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		return nil, false, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, git, "config", "--no-includes", "--file", "-", "--list", "-z")
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "HOME=/nonexistent"}
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		if _, isExit := errors.AsType[*exec.ExitError](err); isExit {
			return nil, false, true
		}
		t.Fatalf("git config: %v", err)
	}
	for _, rec := range strings.Split(string(out), "\x00") {
		if rec == "" {
			continue
		}
		k, v, hasV := strings.Cut(rec, "\n")
		entries = append(entries, configEntry{Key: k, Value: v, NoValue: !hasV})
	}
	return entries, true, true
}

var configSamples = []string{
	"[core]\n\thooksPath = .githooks\n",
	"[core]\n\thooksPath = \"a b\" ; comment\n\tfsmonitor = \"touch x; false\"\n",
	"[include]\n\tpath = ../shared.gitconfig\n[includeIf \"gitdir:~/w/\"]\n\tpath = x.inc\n",
	"[Section \"Sub.Section\"]\nKey = Value\n",
	"[a.B]\nc\n",
	"\xef\xbb\xbf[core]\nbare = false\n",
	"\xef\xbb[core]\n",
	"[core]\r\n\tpager = less\\\r\n -R\r\n",
	"[x]\n y = a\\tb\\nc\\\\d\\\"e\n",
	"[x]\n y = bad\\q\n",
	"[x]\n y = \"unterminated\n",
	"[x]\n y = a    b   # c\n",
	"[x]\n y =   \t lead and trail \t \n",
	"[x \"a\\\"b\"]\n y = 1\n",
	"[x \"a\"b]\n",
	"[x \"a\n\"]\n",
	"k = before any section\n",
	"[x]\n 9y = 1\n",
	"[x]\n y-z = 1\n",
	"[x]\n y # c\n",
	"[x]\ny",
	"[x]\ny=",
	"[]\n",
	"[ \"s\"]\nk=v\n",
	"[x]\ny=\"a\"\"b\"c\n",
	"[x]\ny=\x00z\n",
	"[x \"a\x00b\"]\ny=1\n",
	"# only a comment",
	"",
	"[x]y=1\n",
	"[x] ; c\ny=1\n",
	"[x]\ny\t=\t1\n",
	"[x]\n\ty = \\\n continued\n",
}

func TestParseGitConfigMatchesGit(t *testing.T) {
	for _, s := range configSamples {
		want, wantOK, found := gitConfigList(t, []byte(s))
		if !found {
			t.Skip("git is not installed")
		}
		got, err := parseGitConfig([]byte(s))
		if (err == nil) != wantOK {
			t.Errorf("%q: parse error %v, git accepts it: %v", s, err, wantOK)
			continue
		}
		if wantOK {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("%q: entries differ from git's (-git +ours):\n%s", s, diff)
			}
		}
	}
}

func TestParseGitConfigBounds(t *testing.T) {
	if _, err := parseGitConfig(make([]byte, maxConfigBytes+1)); err == nil {
		t.Error("a file over the size limit was parsed")
	}
	many := strings.Repeat("[x]\ny=1\n", maxConfigEntries+2)
	if _, err := parseGitConfig([]byte(many)); err == nil {
		t.Error("more entries than the limit were accepted")
	}
}

// FuzzParseGitConfig checks the reader never fails where git reads a file,
// and then reads exactly what git reads (the fuzzer runs git for each
// input; the seeds run in every go test).
func FuzzParseGitConfig(f *testing.F) {
	for _, s := range configSamples {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := parseGitConfig(data)
		if len(data) > maxConfigBytes {
			if err == nil {
				t.Fatal("over-size input accepted")
			}
			return
		}
		for _, e := range got {
			if e.Key == "" {
				t.Fatalf("empty key from %q", data)
			}
		}
		if len(data) > 4096 {
			return // keep the git differential cheap
		}
		want, wantOK, found := gitConfigList(t, data)
		if !found {
			return
		}
		if wantOK && err != nil {
			t.Fatalf("git reads %q but the parser fails: %v", data, err)
		}
		if wantOK {
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("%q: entries differ from git's (-git +ours):\n%s", data, diff)
			}
		}
	})
}
