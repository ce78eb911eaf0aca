package fakellm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"time"
)

// certValidity is how long the certificates made for Options.TLS are valid
// (they are valid from an hour before Start, for clocks that lag).
const certValidity = 7 * 24 * time.Hour

// certs is the TLS material of a server started with Options.TLS: a
// throw-away CA and a server certificate it signed.
type certs struct {
	caPEM []byte
	pool  *x509.CertPool
	cert  tls.Certificate
}

// newCerts makes a self-signed ECDSA P-256 CA and, signed by it, a server
// certificate for 127.0.0.1, ::1 and localhost. The CA is what clients
// trust; a separate leaf (rather than one self-signed certificate that is
// both) is what every TLS stack accepts, rustls/webpki included, which
// refuses a CA certificate as the server's own.
func newCerts(now time.Time) (*certs, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("fakellm: CA key: %w", err)
	}
	notBefore, notAfter := now.Add(-time.Hour), now.Add(certValidity)
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{Organization: []string{"agentbox fakellm"}, CommonName: "agentbox fakellm CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("fakellm: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("fakellm: CA certificate: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("fakellm: server key: %w", err)
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{Organization: []string{"agentbox fakellm"}, CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("fakellm: server certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("fakellm: server certificate: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &certs{
		caPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pool:  pool,
		cert:  tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf},
	}, nil
}

// CertPool returns a pool that trusts the server's certificate: its CA, the
// only certificate in it. It is nil unless Options.TLS is set. Each call
// returns a new pool, which the caller may add to.
func (s *Server) CertPool() *x509.CertPool {
	if s.certs == nil {
		return nil
	}
	return s.certs.pool.Clone()
}

// CertPEM returns the PEM of the server's CA certificate (the one
// CertPool trusts), for clients that read a CA file (SSL_CERT_FILE,
// NODE_EXTRA_CA_CERTS, curl --cacert). It is nil unless Options.TLS is set.
func (s *Server) CertPEM() []byte {
	if s.certs == nil {
		return nil
	}
	return append([]byte(nil), s.certs.caPEM...)
}
