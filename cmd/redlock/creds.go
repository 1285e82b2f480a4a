package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/redlock-go/redlock/node"
)

// Environment variables for credentials and TLS, used when the flag is absent.
const (
	envPassword     = "REDLOCK_PASSWORD"
	envPasswordFile = "REDLOCK_PASSWORD_FILE"
	envUser         = "REDLOCK_USER"
	envTLSCA        = "REDLOCK_TLS_CA"
	envTLSCert      = "REDLOCK_TLS_CERT"
	envTLSKey       = "REDLOCK_TLS_KEY"
	envTLSSkip      = "REDLOCK_TLS_SKIP_VERIFY"
)

// secretEnv lists the variables never passed to COMMAND (REDLOCK_NODES is
// passed without its passwords).
var secretEnv = []string{envPassword, envPasswordFile}

const connEnvHelp = `  REDLOCK_PASSWORD         the password of nodes whose URL has none (prefer a file)
  REDLOCK_PASSWORD_FILE    file holding that password, when --password-file is not given
  REDLOCK_USER             ACL user for that password, when --user is not given
  REDLOCK_TLS_CA, REDLOCK_TLS_CERT, REDLOCK_TLS_KEY, REDLOCK_TLS_SKIP_VERIFY
                           the --tls-* flags, when not given
`

// connFlags are the flags that say how to reach and authenticate to the nodes.
type connFlags struct {
	fs                     *flag.FlagSet
	passwordFile, user     string
	tlsCA, tlsCert, tlsKey string
	tlsSkipVerify          bool
}

func (c *connFlags) register(fs *flag.FlagSet) {
	c.fs = fs
	fs.StringVar(&c.passwordFile, "password-file", "", "`FILE` holding the password of nodes whose URL has none (default $"+envPasswordFile+"; or $"+envPassword+")")
	fs.StringVar(&c.user, "user", "", "ACL `USER` for that password (default $"+envUser+")")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM `FILE` of the CAs that sign the nodes' certificates, for rediss:// (default: the system's)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM `FILE` of a client certificate, for rediss:// (with --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM `FILE` of the client certificate's key")
	fs.BoolVar(&c.tlsSkipVerify, "tls-skip-verify", false, "do not verify the nodes' certificates (for tests only)")
}

// isSet reports whether the flag name was given.
func (c *connFlags) isSet(name string) bool {
	set := false
	c.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// orEnv returns v, or the variable name's value when v is empty.
func orEnv(v, name string) string {
	if v != "" {
		return v
	}
	return os.Getenv(name)
}

// apply resolves the flags and their variables: the password goes into the
// URLs that have none, and the TLS configuration is built. Errors name files,
// never their contents.
func (c *connFlags) apply(ns *nodeSet) error {
	pw, err := c.password()
	if err != nil {
		return err
	}
	user := orEnv(c.user, envUser)
	if user != "" && pw == "" {
		return fmt.Errorf("--user %s: no password: give --password-file, %s or %s", user, envPasswordFile, envPassword)
	}
	if pw != "" {
		ns.secrets = append(ns.secrets, pw)
		for i, u := range ns.parsed {
			if u.Password != "" {
				continue // the URL's own credentials win
			}
			u.Username, u.Password = user, pw
			ns.urls[i] = u.Scheme + "://" + url.UserPassword(user, pw).String() + "@" + u.Name()
		}
	}
	return c.tls(ns)
}

// password returns the password of --password-file, REDLOCK_PASSWORD_FILE or
// REDLOCK_PASSWORD, in that order, or "".
func (c *connFlags) password() (string, error) {
	file, from := c.passwordFile, "--password-file"
	if file == "" {
		file, from = os.Getenv(envPasswordFile), envPasswordFile
	}
	if file == "" {
		return os.Getenv(envPassword), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s: %w", from, err)
	}
	pw := strings.TrimRight(string(b), "\r\n") // one line; the final newline is not part of it
	if pw == "" {
		return "", fmt.Errorf("%s %s: empty file", from, file)
	}
	if strings.ContainsAny(pw, "\r\n") {
		return "", fmt.Errorf("%s %s: more than one line", from, file)
	}
	return pw, nil
}

// tls builds the TLS configuration of rediss:// nodes, if any flag asks for one.
func (c *connFlags) tls(ns *nodeSet) error {
	ca, cert, key := orEnv(c.tlsCA, envTLSCA), orEnv(c.tlsCert, envTLSCert), orEnv(c.tlsKey, envTLSKey)
	skip := c.tlsSkipVerify
	if !c.isSet("tls-skip-verify") {
		if v := os.Getenv(envTLSSkip); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s=%q: not a boolean", envTLSSkip, v)
			}
			skip = b
		}
	}
	if ca == "" && cert == "" && key == "" && !skip {
		return nil
	}
	for i, u := range ns.parsed {
		if !u.TLS() {
			return fmt.Errorf("TLS options given, but node %d (%s) is redis://: write rediss:// for TLS", i+1, u.Redacted())
		}
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: skip} //nolint:gosec // only when asked for
	if ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return fmt.Errorf("--tls-ca: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("--tls-ca %s: no PEM certificate in it", ca)
		}
	}
	if (cert == "") != (key == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("--tls-cert %s, --tls-key %s: %w", cert, key, err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	ns.tls = cfg
	return nil
}

// nodeOptions returns the node options of the set (its TLS configuration).
func (ns *nodeSet) nodeOptions() []node.Option {
	if ns.tls == nil {
		return nil
	}
	return []node.Option{node.WithTLSConfig(ns.tls)}
}

// dial connects to node i for a single exchange (status), as the library would.
func (ns *nodeSet) dial(ctx context.Context, i int, timeout time.Duration) (redis.Conn, error) {
	u := ns.parsed[i]
	return redis.DialContext(ctx, "tcp", u.Addr(),
		redis.DialConnectTimeout(timeout), redis.DialReadTimeout(timeout), redis.DialWriteTimeout(timeout),
		redis.DialUsername(u.Username), redis.DialPassword(u.Password), redis.DialDatabase(u.DB),
		redis.DialUseTLS(u.TLS()), redis.DialTLSConfig(ns.tls))
}

// childEnv returns redlock's environment for COMMAND, without secrets: no
// REDLOCK_PASSWORD or REDLOCK_PASSWORD_FILE, and REDLOCK_NODES without the
// user info of its URLs.
func childEnv(environ []string) []string {
	env := make([]string, 0, len(environ))
next:
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		for _, s := range secretEnv {
			if k == s {
				continue next
			}
		}
		if k == envNodes {
			parts := strings.Split(v, ",")
			for i, p := range parts {
				if u, err := node.Parse(strings.TrimSpace(p)); err == nil {
					parts[i] = u.Redacted()
				} else {
					parts[i] = node.Redact(strings.TrimSpace(p))
				}
			}
			kv = k + "=" + strings.Join(parts, ",")
		}
		env = append(env, kv)
	}
	return env
}
