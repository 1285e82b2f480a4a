package node_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redlock-go/redlock/node"
	"github.com/redlock-go/redlock/redistest"
)

// TestDialAuthSelect: the URL's user, password and database are used.
func TestDialAuthSelect(t *testing.T) {
	s := redistest.Start(t)
	_, err := s.Do("ACL", "SETUSER", "locker", "on", ">s3cret", "~*", "&*", "+@all")
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	n, err := node.Dial("redis://locker:s3cret@" + s.Addr() + "/3")
	require.NoError(t, err)
	defer n.Close()
	a, err := n.Acquire(ctx, "k", "k:f", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, a.OK)
	c, err := redis.DialURL(s.URL() + "/3")
	require.NoError(t, err)
	defer c.Close()
	v, err := redis.String(c.Do("GET", "k"))
	require.NoError(t, err)
	assert.Equal(t, "tok", v, "the key is in database 3")

	bad, err := node.Dial("redis://locker:wrong@" + s.Addr())
	require.NoError(t, err)
	defer bad.Close()
	err = bad.Ping(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "AUTH")
	assert.NotContains(t, err.Error(), "wrong", "no password in errors")
}

// TestDialTLS: rediss:// speaks TLS, verifying the server unless told not to.
func TestDialTLS(t *testing.T) {
	cert := selfSigned(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	require.NoError(t, err)
	srv := &fakeServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			srv.mu.Lock()
			srv.conns = append(srv.conns, c)
			srv.mu.Unlock()
			go answer("+PONG\r\n")(c)
		}
	}()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	url := "rediss://" + ln.Addr().String()

	n, err := node.Dial(url, node.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}))
	require.NoError(t, err)
	defer n.Close()
	require.NoError(t, n.Ping(ctx))

	// A long node timeout: the handshake must fail on the certificate, not on
	// the default 500 ms timeout of a loaded machine (-race, 2 cores: a CI run
	// at load 8 timed out first).
	strict, err := node.Dial(url, node.WithTimeout(5*time.Second))
	require.NoError(t, err)
	defer strict.Close()
	err = strict.Ping(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "TLS handshake")
}

func selfSigned(t *testing.T) tls.Certificate {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestWithDialer: Dial opens its connections through the given dialer (with
// the URL's address and a deadline), a dialer's error is the call's error,
// and a nil dialer is refused.
func TestWithDialer(t *testing.T) {
	s := redistest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()

	var dials []string
	var hadDeadline []bool
	d := func(ctx context.Context, network, addr string) (net.Conn, error) {
		_, ok := ctx.Deadline()
		dials, hadDeadline = append(dials, network+" "+addr), append(hadDeadline, ok)
		var nd net.Dialer
		return nd.DialContext(ctx, network, addr)
	}
	n, err := node.Dial(s.URL(), node.WithDialer(d))
	require.NoError(t, err)
	defer n.Close()
	a, err := n.Acquire(ctx, "k", "k:f", "tok", time.Minute)
	require.NoError(t, err)
	require.True(t, a.OK)
	require.NotEmpty(t, dials)
	assert.Equal(t, "tcp "+s.Addr(), dials[0])
	assert.True(t, hadDeadline[0], "the dial is bounded by the call")

	refused := errors.New("no route through the tunnel")
	bad, err := node.Dial(s.URL(), node.WithDialer(func(context.Context, string, string) (net.Conn, error) { return nil, refused }))
	require.NoError(t, err)
	defer bad.Close()
	assert.ErrorIs(t, bad.Ping(ctx), refused)

	_, err = node.Dial(s.URL(), node.WithDialer(nil))
	assert.ErrorIs(t, err, node.ErrInvalidOption)
}
