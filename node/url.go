package node

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// URL is a parsed node URL. Its grammar is strict, so that what is named is what
// is dialed:
//
//	url      = scheme "://" [userinfo "@"] host [":" port] ["/" [db]]
//	scheme   = "redis" | "rediss"                  ; any case; rediss: TLS
//	userinfo = [user] ":" password | password      ; percent-encoded
//	host     = name | IPv4 | "[" IPv6 "]"          ; name: letters, digits, - . _
//	port     = 1 to 65535, decimal, no leading zero ; default 6379
//	db       = 0 to 2147483647, decimal, no leading zero ; default 0
//
// The user info ends at the last "@", so a password may hold any character, but
// "/", "?", "#", "@", "[", "]", "%", spaces and control characters must be
// percent-encoded (%2F, %3F, %23, %40, %5B, %5D, %25, %20): a URL where they are
// not is refused, as is one with a query (?...), a fragment (#...), a path after
// the database (/1/ or /1/x), an empty port (host:), or an IPv6 zone. A user info
// without ":" is a password alone, as redis-cli reads it (AUTH password); with
// "user:password" the node authenticates as an ACL user (AUTH user password).
// Unix sockets are not supported.
//
// Only the Username and Password fields hold the user info: no error of Parse
// shows it (errors show the URL with it replaced by "xxxxx"), and neither do the
// methods of URL, nor fmt's %v, %+v and %#v of a URL (String, GoString).
type URL struct {
	Scheme   string // "redis" or "rediss"
	Username string // ACL user; empty for the default user
	Password string // empty: no AUTH
	Host     string // lower case; an IPv6 address without brackets
	Port     int
	DB       int
}

// DefaultPort is the port of a URL that gives none.
const DefaultPort = 6379

// maxDB bounds the database number (Redis takes an int).
const maxDB = 1<<31 - 1

// URLError is the error of a URL that Parse refuses. It wraps ErrInvalidURL. Its
// message never contains the URL's user info (user name or password).
type URLError struct {
	// URL is the input with its user info, if any, replaced by "xxxxx", cut to
	// 200 bytes.
	URL string
	// Reason says what is wrong.
	Reason string
}

func (e *URLError) Error() string {
	return fmt.Sprintf("%v %q: %s", ErrInvalidURL, e.URL, e.Reason)
}

// Unwrap returns ErrInvalidURL.
func (e *URLError) Unwrap() error { return ErrInvalidURL }

// splitSecret splits raw around its user info: everything between "://" (or the
// start, without a scheme) and the last "@". ok is false when there is no "@".
func splitSecret(raw string) (head, userinfo, tail string, ok bool) {
	at := strings.LastIndexByte(raw, '@')
	if at < 0 {
		return raw, "", "", false
	}
	start := 0
	if i := strings.Index(raw, "://"); i >= 0 && i < at {
		start = i + 3
	}
	return raw[:start], raw[start:at], raw[at+1:], true
}

// Redact returns raw, a node URL or a string meant to be one, with its user info
// (everything between "://", or the start, and the last "@") replaced by "xxxxx",
// cut to 200 bytes: fit for a message or a log.
func Redact(raw string) string {
	if head, _, tail, ok := splitSecret(raw); ok {
		raw = head + "xxxxx@" + tail
	}
	if len(raw) > 200 {
		cut := 200
		for cut > 0 && raw[cut]&0xC0 == 0x80 {
			cut--
		}
		raw = raw[:cut] + "..."
	}
	return raw
}

// Parse parses a node URL (see URL for the grammar). Errors are *URLError.
func Parse(raw string) (*URL, error) {
	fail := func(format string, args ...any) (*URL, error) {
		return nil, &URLError{URL: Redact(raw), Reason: fmt.Sprintf(format, args...)}
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return fail("not a URL: write redis://host[:port][/db] or rediss://... for TLS")
	}
	if scheme = strings.ToLower(scheme); scheme != "redis" && scheme != "rediss" {
		return fail("scheme must be redis:// or rediss://")
	}
	u := &URL{Scheme: scheme, Port: DefaultPort}
	if _, info, tail, ok := splitSecret(raw); ok {
		if err := u.setUserinfo(info); err != "" {
			return fail("%s", err)
		}
		rest = tail
	}
	if i := strings.IndexAny(rest, "?#"); i >= 0 {
		if rest[i] == '?' {
			return fail("query options (?...) are not supported: the database goes in the path (/db), TLS in the scheme (rediss://)")
		}
		return fail("a fragment (#...) is not allowed; percent-encode # as %%23 in a password")
	}
	hostport, path, hasPath := strings.Cut(rest, "/")
	if err := u.setHostPort(hostport); err != "" {
		return fail("%s", err)
	}
	if hasPath && path != "" {
		db, err := decimal(path, maxDB)
		if err != "" {
			return fail("database %q: %s (one number, no trailing /)", path, err)
		}
		u.DB = db
	}
	return u, nil
}

// setUserinfo sets the credentials. Its error never quotes info.
func (u *URL) setUserinfo(info string) string {
	for i := 0; i < len(info); i++ {
		if c := info[i]; c <= ' ' || c == 0x7f || strings.IndexByte("/?#@[]", c) >= 0 {
			return "the user info has a character that must be percent-encoded (/ ? # @ [ ] space or control: %2F %3F %23 %40 %5B %5D %20)"
		}
	}
	user, pass, hasColon := strings.Cut(info, ":")
	var err1, err2 error
	if user, err1 = url.PathUnescape(user); err1 == nil {
		pass, err2 = url.PathUnescape(pass)
	}
	if err1 != nil || err2 != nil {
		return "the user info has a % that does not start a percent-encoded byte (write % as %25)"
	}
	switch {
	case !hasColon:
		u.Password = user // redis-cli: a lone user info is the password
	case pass == "" && user != "":
		return "a user name needs a password: redis://user:password@host"
	default:
		u.Username, u.Password = user, pass
	}
	return ""
}

// setHostPort sets the host and port. Its error quotes only hostport, which
// holds no user info.
func (u *URL) setHostPort(hp string) string {
	host, port := hp, ""
	if strings.HasPrefix(hp, "[") {
		end := strings.IndexByte(hp, ']')
		if end < 0 {
			return fmt.Sprintf("host %q: missing ] after an IPv6 address", hp)
		}
		host, port = hp[1:end], hp[end+1:]
		ip := net.ParseIP(host)
		if ip == nil || !strings.Contains(host, ":") {
			return fmt.Sprintf("host %q: not an IPv6 address (zones are not supported)", hp[:end+1])
		}
		host = ip.String()
		if port != "" && port[0] != ':' {
			return fmt.Sprintf("%q after the IPv6 address: expected :port", port)
		}
	} else if i := strings.IndexByte(hp, ':'); i >= 0 {
		host, port = hp[:i], hp[i:]
	}
	if host == "" {
		return "missing host"
	}
	if !strings.HasPrefix(hp, "[") {
		if len(host) > 253 {
			return "host name longer than 253 bytes"
		}
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
				return fmt.Sprintf("host %q: only letters, digits, -, . and _ (an IPv6 address goes in brackets)", host)
			}
		}
		host = strings.ToLower(host)
	}
	u.Host = host
	if port == "" {
		return ""
	}
	p, err := decimal(port[1:], 65535)
	if err != "" || p == 0 {
		if err == "" {
			err = "must be 1 to 65535"
		}
		return fmt.Sprintf("port %q: %s", port[1:], err)
	}
	u.Port = p
	return ""
}

// decimal parses a decimal number in [0, max], written without sign or leading
// zeros.
func decimal(s string, max int) (int, string) {
	if s == "" {
		return 0, "empty: give a number or nothing at all"
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, "not a decimal number"
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, "no leading zeros"
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > max {
		return 0, fmt.Sprintf("must be at most %d", max)
	}
	return n, ""
}

// Addr returns host:port, as dialed.
func (u URL) Addr() string { return net.JoinHostPort(u.Host, strconv.Itoa(u.Port)) }

// Name returns the canonical name of the node: host:port/db.
func (u URL) Name() string { return fmt.Sprintf("%s/%d", u.Addr(), u.DB) }

// Redacted returns the URL in canonical form without its user info: it names the
// same instance and database, and Parse accepts it.
func (u URL) Redacted() string { return u.Scheme + "://" + u.Name() }

// String returns Redacted, so that printing a URL never shows a password.
func (u URL) String() string { return u.Redacted() }

// GoString is String for %#v.
func (u URL) GoString() string { return "node.URL(" + strconv.Quote(u.Redacted()) + ")" }

// TLS reports whether the URL asks for TLS (rediss://).
func (u URL) TLS() bool { return u.Scheme == "rediss" }

// ParseURL checks a node URL and returns the node's canonical name (host:port/db);
// see URL for the grammar. Errors are *URLError (errors.Is ErrInvalidURL) and never
// contain the user info.
func ParseURL(rawURL string) (name string, err error) {
	u, err := Parse(rawURL)
	if err != nil {
		return "", err
	}
	return u.Name(), nil
}

// sameInstance reports, for URLs already parsed, the first pair that is one Redis
// instance (same host:port): different databases of one instance are not
// independent nodes.
func sameInstance(urls []*URL) (i, j int, ok bool) {
	seen := make(map[string]int, len(urls))
	for j, u := range urls {
		if i, dup := seen[u.Addr()]; dup {
			return i, j, true
		}
		seen[u.Addr()] = j
	}
	return 0, 0, false
}

// CheckDistinct parses urls and fails when two of them are one Redis instance
// (the same host:port, whatever their databases): each must be an independent
// node. Errors are *URLError for a bad URL, or wrap ErrInvalidURL.
func CheckDistinct(urls []string) error {
	parsed := make([]*URL, len(urls))
	for k, raw := range urls {
		u, err := Parse(raw)
		if err != nil {
			return fmt.Errorf("node %d: %w", k, err)
		}
		parsed[k] = u
	}
	if i, j, dup := sameInstance(parsed); dup {
		return fmt.Errorf("%w: nodes %d (%s) and %d (%s) are the same Redis instance %s: each node must be an independent instance",
			ErrInvalidURL, i, parsed[i].Name(), j, parsed[j].Name(), parsed[j].Addr())
	}
	return nil
}
