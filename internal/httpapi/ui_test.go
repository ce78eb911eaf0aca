package httpapi

import (
	"net"
	"net/http"
	"strconv"
	"testing"

	"github.com/agentbox/agentbox/client"
)

// TestUIMount: the inspector's page (Config.UI) is served without a token
// at /ui and under /ui/, while the API beside it still needs one, and the
// Host and Origin checks apply to the page as to the API (DNS rebinding,
// other sites).
func TestUIMount(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("page " + r.URL.Path))
	})
	h := newHarness(t, Config{Token: testToken, UI: ui})
	port := strconv.Itoa(h.srv.Listener.Addr().(*net.TCPAddr).Port)
	noAuth := []string{"Authorization", ""}

	for _, p := range []string{"/ui", "/ui/", "/ui/app.js", "/ui/anything/else"} {
		r := h.do("GET", p, "", noAuth...)
		if r.StatusCode != 200 || string(r.body) != "page "+p {
			t.Errorf("GET %s without a token: %d %q", p, r.StatusCode, r.body)
		}
	}
	// Only GET (and HEAD): anything else is an API request, token first.
	h.do("POST", "/ui", "x", noAuth...).problem(t, 401, client.ProblemUnauthorized)
	h.do("POST", "/ui", "x").problem(t, 405, client.ProblemMethodNotAllowed)
	// Paths that only look like the page's are the API's.
	h.do("GET", "/uix", "", noAuth...).problem(t, 401, client.ProblemUnauthorized)
	h.do("GET", "/v1/ui", "", noAuth...).problem(t, 401, client.ProblemUnauthorized)
	h.do("GET", "/v1/sessions", "", noAuth...).problem(t, 401, client.ProblemUnauthorized)
	// An unclean path is refused before it reaches the page's handler.
	h.do("GET", "/ui/../v1/sessions", "", noAuth...).problem(t, 400, client.ProblemBadRequest)

	// A rebinding page (its own name resolving to 127.0.0.1) and a page
	// of another site get 403, the page included.
	for _, hdr := range [][]string{
		{"Host", "attacker.example:" + port},
		{"Origin", "https://evil.example"},
		{"Sec-Fetch-Site", "cross-site"},
	} {
		h.do("GET", "/ui", "", append(noAuth, hdr...)...).problem(t, 403, client.ProblemForbidden)
	}
	h.do("GET", "/ui", "", append(noAuth, "Host", "localhost:"+port, "Sec-Fetch-Site", "none")...).ok(t, 200, nil)

	// Without Config.UI there is no page.
	bare := newHarness(t, Config{Token: testToken})
	bare.do("GET", "/ui", "", noAuth...).problem(t, 401, client.ProblemUnauthorized)
	bare.do("GET", "/ui", "").problem(t, 404, client.ProblemNotFound)
}
