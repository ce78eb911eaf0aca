package httpapi

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// TestContractLoads: the embedded document loads (a build whose document
// does not would stop at the first request), and every operation of the
// table finds its parameters and body in it.
func TestContractLoads(t *testing.T) {
	c, err := loadContract(api.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range operations() {
		sp := o.spec()
		if _, err := c.operation(sp.Method, sp.Path); err != nil {
			t.Error(err)
		}
		if err := o.(interface{ planErr() error }).planErr(); err != nil {
			t.Errorf("%s %s: %v", sp.Method, sp.Path, err)
		}
	}
}

// TestContractFailsClosed: a request schema with a keyword or a format the
// validator does not enforce does not load, so that no constraint can be
// documented and not enforced. Answer schemas only document, and may have
// any.
func TestContractFailsClosed(t *testing.T) {
	doc := func(body, param, answer string) []byte {
		return []byte(`{"paths":{"/x":{"post":{
			"parameters":[{"name":"q","in":"query","schema":` + param + `}],
			"requestBody":{"required":true,"content":{"application/json":{"schema":{"$ref":"#/components/schemas/In"}}}}}}},
			"components":{"schemas":{"In":` + body + `,"Out":` + answer + `}}}`)
	}
	ok := `{"type":"object","properties":{"a":{"type":"string","maxLength":3,"pattern":"^a"}},"additionalProperties":false}`
	okParam := `{"type":"integer","format":"int64","minimum":1}`
	if _, err := loadContract(doc(ok, okParam, `{"type":"string","format":"date-time","readOnly":true}`)); err != nil {
		t.Fatalf("a supported document: %v", err)
	}
	for name, d := range map[string][]byte{
		"format on a string":      doc(`{"type":"object","properties":{"a":{"type":"string","format":"date-time"}}}`, okParam, `{}`),
		"uniqueItems":             doc(`{"type":"array","uniqueItems":true}`, okParam, `{}`),
		"oneOf":                   doc(`{"oneOf":[{"type":"string"}]}`, okParam, `{}`),
		"exclusiveMinimum":        doc(ok, `{"type":"integer","exclusiveMinimum":0}`, `{}`),
		"readOnly":                doc(`{"type":"object","properties":{"a":{"type":"string","readOnly":true}}}`, okParam, `{}`),
		"bad pattern":             doc(`{"type":"string","pattern":"("}`, okParam, `{}`),
		"type list":               doc(`{"type":["string","integer"]}`, okParam, `{}`),
		"number enum":             doc(`{"type":"integer","enum":[1,2]}`, okParam, `{}`),
		"dangling $ref":           doc(`{"type":"object","properties":{"a":{"$ref":"#/components/schemas/Nope"}}}`, okParam, `{}`),
		"unsupported in an items": doc(`{"type":"array","items":{"type":"string","contentEncoding":"base64"}}`, okParam, `{}`),
	} {
		if _, err := loadContract(d); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// TestNoHumaAtRunTime: the daemon's binary links none of huma (nor of any
// other OpenAPI or JSON Schema library); tests use it to generate the
// document and as the differential oracle.
func TestNoHumaAtRunTime(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "../../cmd/agentbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/danielgtaylor/huma", "github.com/getkin/kin-openapi", "github.com/santhosh-tekuri/jsonschema"} {
			if strings.HasPrefix(pkg, banned) {
				t.Errorf("cmd/agentbox links %s", pkg)
			}
		}
	}
}

func (o *op[I, O]) planErr() error {
	_, err := planInput(reflect.TypeFor[I](), o.Method, o.Path, theContract())
	return err
}
