package pgwire

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// maxIterations bounds the PBKDF2 iterations a server may ask for
// (PostgreSQL's default is 4096).
const maxIterations = 1 << 22

// scram is the client side of one SCRAM-SHA-256 exchange (RFC 5802,
// RFC 7677), without channel binding, as PostgreSQL speaks it: the user
// name is the start-up message's, so the client sends "n=".
type scram struct {
	password    string
	clientNonce string
	firstBare   string
	serverSig   []byte
	verified    bool
}

// newSCRAM starts an exchange for password, prepared with SASLprep as
// PostgreSQL prepares it when it sets it.
func newSCRAM(password string) (*scram, error) {
	nonce := make([]byte, 18)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	s := &scram{password: saslprep(password), clientNonce: base64.StdEncoding.EncodeToString(nonce)}
	s.firstBare = "n=,r=" + s.clientNonce
	return s, nil
}

// first is the client-first-message.
func (s *scram) first() []byte { return []byte("n,," + s.firstBare) }

// final answers the server-first-message with the client-final-message.
func (s *scram) final(serverFirst []byte) ([]byte, error) {
	attrs, err := scramAttrs(string(serverFirst))
	if err != nil {
		return nil, err
	}
	nonce, salt64, iter := attrs["r"], attrs["s"], attrs["i"]
	if !strings.HasPrefix(nonce, s.clientNonce) || len(nonce) == len(s.clientNonce) {
		return nil, errors.New("SCRAM: the server's nonce does not extend ours")
	}
	salt, err := base64.StdEncoding.DecodeString(salt64)
	if err != nil || len(salt) == 0 {
		return nil, errors.New("SCRAM: invalid salt")
	}
	n, err := strconv.Atoi(iter)
	if err != nil || n < 1 || n > maxIterations {
		return nil, fmt.Errorf("SCRAM: iteration count %q out of range (1 to %d)", iter, maxIterations)
	}
	salted, err := pbkdf2.Key(sha256.New, s.password, salt, n, sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("SCRAM: %w", err)
	}
	clientKey := mac(salted, "Client Key")
	stored := sha256.Sum256(clientKey)
	withoutProof := "c=biws,r=" + nonce
	auth := s.firstBare + "," + string(serverFirst) + "," + withoutProof
	sig := mac(stored[:], auth)
	proof := make([]byte, len(clientKey))
	for i := range proof {
		proof[i] = clientKey[i] ^ sig[i]
	}
	s.serverSig = mac(mac(salted, "Server Key"), auth)
	return []byte(withoutProof + ",p=" + base64.StdEncoding.EncodeToString(proof)), nil
}

// verify checks the server-final-message: the server proves it knows the
// password too.
func (s *scram) verify(serverFinal []byte) error {
	attrs, err := scramAttrs(string(serverFinal))
	if err != nil {
		return err
	}
	if e, ok := attrs["e"]; ok {
		return fmt.Errorf("SCRAM: the server refused: %s", e)
	}
	v, err := base64.StdEncoding.DecodeString(attrs["v"])
	if err != nil || s.serverSig == nil || !hmac.Equal(v, s.serverSig) {
		return errors.New("SCRAM: the server's signature is wrong: it does not know the password")
	}
	s.verified = true
	return nil
}

func mac(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

// scramAttrs parses "a=v,b=w".
func scramAttrs(msg string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range strings.Split(msg, ",") {
		if len(kv) < 2 || kv[1] != '=' {
			return nil, errors.New("SCRAM: malformed server message")
		}
		m[kv[:1]] = kv[2:]
	}
	return m, nil
}
