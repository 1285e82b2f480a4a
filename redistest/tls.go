package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TLSFiles are PEM files made at test time: a CA, a server certificate for
// 127.0.0.1, ::1 and localhost, and a client certificate, both signed by the CA
// (ECDSA P-256, valid for a day).
type TLSFiles struct {
	Dir                   string
	CA                    string // the CA's certificate
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewTLSFiles writes a CA and certificates signed by it in a temporary directory.
func NewTLSFiles(tb testing.TB) *TLSFiles {
	tb.Helper()
	dir := tb.TempDir()
	f := &TLSFiles{
		Dir: dir, CA: filepath.Join(dir, "ca.pem"),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	now := time.Now()
	caKey := newKey(tb)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER := sign(tb, ca, ca, &caKey.PublicKey, caKey)
	writePEM(tb, f.CA, "CERTIFICATE", caDER)
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	for i, leaf := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
	}{{f.ServerCert, f.ServerKey, x509.ExtKeyUsageServerAuth}, {f.ClientCert, f.ClientKey, x509.ExtKeyUsageClientAuth}} {
		key := newKey(tb)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)), Subject: pkix.Name{CommonName: "redistest"},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{leaf.usage},
			DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		}
		writePEM(tb, leaf.cert, "CERTIFICATE", sign(tb, tmpl, caCert, &key.PublicKey, caKey))
		der, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			tb.Fatal(err)
		}
		writePEM(tb, leaf.key, "EC PRIVATE KEY", der)
	}
	return f
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

func sign(tb testing.TB, tmpl, parent *x509.Certificate, pub *ecdsa.PublicKey, priv *ecdsa.PrivateKey) []byte {
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, priv)
	if err != nil {
		tb.Fatal(err)
	}
	return der
}

func writePEM(tb testing.TB, path, typ string, der []byte) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// ClientConfig returns a TLS configuration that trusts the CA and presents the
// client certificate.
func (f *TLSFiles) ClientConfig(tb testing.TB) *tls.Config {
	tb.Helper()
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	pair, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		tb.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

// TLSServer is a redis-server that also accepts TLS connections, with client
// certificates required (tls-auth-clients yes). Its plaintext port (Addr, URL)
// stays open for the test's own inspection (Do, Keys).
type TLSServer struct {
	*Server
	Files   *TLSFiles
	TLSPort int
}

// TLSAddr returns 127.0.0.1:port of the TLS port.
func (s *TLSServer) TLSAddr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.TLSPort)) }

// TLSURL returns rediss://127.0.0.1:port of the TLS port.
func (s *TLSServer) TLSURL() string { return "rediss://" + s.TLSAddr() }

// StartTLS starts a redis-server with a TLS port and certificates made for the
// test, plus extraArgs. It skips the test (or fails it, under
// REDLOCK_REQUIRE_REDIS=1) when redis-server was built without TLS.
func StartTLS(tb testing.TB, extraArgs ...string) *TLSServer {
	tb.Helper()
	bin := Binary(tb)
	f := NewTLSFiles(tb)
	var lastErr error
	for try := 0; try < 3; try++ {
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		args := append([]string{
			"--tls-port", strconv.Itoa(port), "--tls-cert-file", f.ServerCert, "--tls-key-file", f.ServerKey,
			"--tls-ca-cert-file", f.CA, "--tls-auth-clients", "yes",
		}, extraArgs...)
		p, err := Launch(bin, tb.TempDir(), args...)
		if err == nil {
			tb.Cleanup(p.Kill)
			return &TLSServer{Server: &Server{Process: p, tb: tb}, Files: f, TLSPort: port}
		}
		lastErr = err
		if s := err.Error(); strings.Contains(s, "tls") && (strings.Contains(s, "Bad directive") || strings.Contains(s, "not supported")) {
			msg := "redis-server was built without TLS support (BUILD_TLS): " + s
			if os.Getenv(RequireEnv) == "1" {
				tb.Fatalf("%s; %s=1 makes this a failure", msg, RequireEnv)
			}
			tb.Skip(msg)
		}
	}
	tb.Fatal(lastErr)
	return nil
}
