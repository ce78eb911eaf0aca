package egress

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// CA is the certificate authority of one sandbox's TLS interception: the
// egress proxy signs with it a leaf for each host it terminates a tunnel
// for (only hosts of secrets that opt in, see Secret.InterceptTLS). Only
// that sandbox trusts it, through the bundle it is given (Bundle); its key
// is made in the daemon's memory, never written anywhere, and never leaves
// the daemon, and the CA is dropped with the sandbox's gate. Its name
// constraints hold it to the hosts it was made for, so that even a stolen
// key could not vouch for any other name.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// Validity of the CA and of its leaves; a leaf is made again when it has
// less than a day left.
const (
	caValidity   = 365 * 24 * time.Hour
	leafValidity = 30 * 24 * time.Hour
	// maxLeaves bounds the leaves kept for reuse.
	maxLeaves = 256
)

// NewCA makes a CA named name for hosts (secret host patterns: "example.com"
// or "*.example.com").
func NewCA(name string, hosts []string) (*CA, error) {
	if len(hosts) == 0 {
		return nil, errors.New("egress: a CA for no host")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: CA key: %w", err)
	}
	var permitted []string
	for _, h := range hosts {
		// "example.com" permits the name and its subdomains,
		// ".example.com" only subdomains (RFC 5280 as Go reads it).
		p := strings.TrimPrefix(strings.ToLower(h), "*")
		if !slices.Contains(permitted, p) {
			permitted = append(permitted, p)
		}
	}
	now := time.Now()
	// x509 makes the serial number and, for a CA, the subject key id;
	// leaves get the authority key id from it.
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name, Organization: []string{"agentbox sandbox TLS interception"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		PermittedDNSDomains:   permitted,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: CA certificate: %w", err)
	}
	return &CA{cert: cert, key: key, leaves: map[string]*tls.Certificate{},
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// CertPEM is the CA's certificate, PEM-encoded: what the sandbox trusts.
func (ca *CA) CertPEM() []byte { return bytes.Clone(ca.certPEM) }

// Certificate is the CA's parsed certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Bundle is what a sandbox's TLS clients trust: roots (the host's, PEM)
// followed by the CA.
func (ca *CA) Bundle(roots []byte) []byte {
	var b bytes.Buffer
	b.Write(roots)
	if len(roots) > 0 && roots[len(roots)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteString("# agentbox: this sandbox's TLS interception CA\n")
	b.Write(ca.certPEM)
	return b.Bytes()
}

// leaf returns a certificate for host (a lower-case name) signed by ca.
func (ca *CA) leaf(host string) (*tls.Certificate, error) {
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && time.Until(c.Leaf.NotAfter) > 24*time.Hour {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	notAfter := now.Add(leafValidity)
	if notAfter.After(ca.cert.NotAfter) {
		notAfter = ca.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: host},
		DNSNames:              []string{host},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, fmt.Errorf("egress: certificate for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(ca.leaves) >= maxLeaves {
		// A wildcard secret's many names: start the cache over.
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}

// hostRootFiles are where Linux distributions keep the system's roots, in
// the order Go's crypto/x509 looks.
var hostRootFiles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// HostRoots reads the host's trusted roots as PEM (the file SSL_CERT_FILE
// names, else the first of the usual places), for a sandbox's bundle;
// empty when there are none.
func HostRoots(getenv func(string) (string, bool)) []byte {
	files := hostRootFiles
	if getenv != nil {
		if f, ok := getenv("SSL_CERT_FILE"); ok && f != "" {
			files = []string{f}
		}
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
			return b
		}
	}
	return nil
}

// CAEnv are the variables that point a sandbox's TLS clients at bundle (a
// path inside the sandbox): OpenSSL and Go (SSL_CERT_FILE), Node, Python
// requests, curl and git.
func CAEnv(bundle string) map[string]string {
	return map[string]string{
		"SSL_CERT_FILE":       bundle,
		"NODE_EXTRA_CA_CERTS": bundle,
		"REQUESTS_CA_BUNDLE":  bundle,
		"CURL_CA_BUNDLE":      bundle,
		"GIT_SSL_CAINFO":      bundle,
	}
}
