package vendortest

import (
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
)

type testSandbox struct {
	*Box
	id     string
	labels map[string]string
}

func writeTestError(w http.ResponseWriter, _ *http.Request, status int, code, msg string) {
	WriteJSON(w, status, map[string]string{"code": code, "message": msg})
}

// TestFakePages: a list pages through the matching sandboxes by id, and
// the last page has no cursor; a removed sandbox is killed and gone, an
// unknown one is 404 with the vendor's message.
func TestFakePages(t *testing.T) {
	f := NewFake[*testSandbox](t, "v", writeTestError, "no sandbox %s")
	for _, id := range []string{"e", "a", "d", "b", "c"} {
		box, err := NewBox("/home/user")
		if err != nil {
			t.Fatal(err)
		}
		owner := "me"
		if id == "d" {
			owner = "other"
		}
		if !f.Add(id, &testSandbox{Box: box, id: id, labels: map[string]string{"owner": owner}}) {
			t.Fatalf("Add(%s) refused", id)
		}
	}
	if box, _ := NewBox("/home/user"); f.Add("a", &testSandbox{Box: box}) {
		t.Error("Add of a taken id accepted")
	} else {
		box.Kill()
	}
	mine := func(sb *testSandbox) bool { return Labelled(sb.labels, map[string]string{"owner": "me"}) }
	var got []string
	cursor := ""
	for range 5 {
		page, next := f.Page(cursor, 2, mine)
		for _, sb := range page {
			got = append(got, sb.id)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if !slices.Equal(got, []string{"a", "b", "c", "e"}) {
		t.Errorf("pages = %v, want a b c e", got)
	}
	sb, _ := f.Get("b")
	rec := httptest.NewRecorder()
	if _, ok := f.Remove(rec, httptest.NewRequest("DELETE", "/b", nil), "b"); !ok {
		t.Fatalf("Remove(b): %d %s", rec.Code, rec.Body)
	}
	if _, ok := f.Get("b"); ok {
		t.Error("b is still there")
	}
	if _, err := os.Stat(sb.Root); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("b's directory after Remove: %v", err)
	}
	rec = httptest.NewRecorder()
	if _, ok := f.Remove(rec, httptest.NewRequest("DELETE", "/b", nil), "b"); ok || rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no sandbox b") {
		t.Errorf("Remove of a gone sandbox: %v, %d %s", ok, rec.Code, rec.Body)
	}
	f.Fail("get", Fault{Status: 429, Message: "slow down"})
	rec = httptest.NewRecorder()
	if _, ok := f.Sandbox(rec, httptest.NewRequest("GET", "/a", nil), "get", "a"); ok || rec.Code != 429 || !strings.Contains(rec.Body.String(), `"code":"injected"`) {
		t.Errorf("a faulted get: %v, %d %s", ok, rec.Code, rec.Body)
	}
	f.Fail("get", Fault{})
	if _, ok := f.Sandbox(httptest.NewRecorder(), httptest.NewRequest("GET", "/a", nil), "get", "a"); !ok {
		t.Error("a get after the fault was cleared failed")
	}
}
