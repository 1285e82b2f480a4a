package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// SentinelMaster is the name under which a SentinelSet's sentinels monitor
// its primary.
const SentinelMaster = "redlock-primary"

// SentinelSet is a Sentinel-managed primary with its replicas and sentinels,
// started by a test: real redis-server and redis-sentinel processes.
type SentinelSet struct {
	// Servers are the primary at start (Servers[0]) and its replicas.
	Servers []*Server
	// Sentinels are the sentinels' host:port addresses.
	Sentinels []string
	tb        testing.TB
}

// SentinelBinary returns the path of redis-sentinel, skipping (or failing,
// under REDLOCK_REQUIRE_REDIS=1) the test when it is missing.
func SentinelBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-sentinel")
	if err != nil {
		msg := "redis-sentinel not found on PATH: Sentinel tests need it (apt-get install -y redis-sentinel)"
		if os.Getenv(RequireEnv) == "1" {
			tb.Fatalf("%s; %s=1 makes this a failure", msg, RequireEnv)
		}
		tb.Skipf("%s; set %s=1 to fail instead of skipping", msg, RequireEnv)
	}
	return bin
}

// StartSentinel starts a primary, replicas replicas of it, and sentinels
// sentinels monitoring it as SentinelMaster (quorum: a majority of them, down
// after 1s), and waits, at most 30s, until the replicas are in sync and every
// sentinel knows them. Everything is killed when the test ends.
func StartSentinel(tb testing.TB, replicas, sentinels int) *SentinelSet {
	tb.Helper()
	bin := SentinelBinary(tb)
	primary := Start(tb)
	set := &SentinelSet{Servers: []*Server{primary}, tb: tb}
	host, port := splitAddr(tb, primary.Addr())
	for range replicas {
		set.Servers = append(set.Servers, Start(tb, "--replicaof", host, strconv.Itoa(port)))
	}
	for range sentinels {
		set.Sentinels = append(set.Sentinels, startSentinel(tb, bin, primary.Addr(), sentinels/2+1))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg := set.ready()
		if msg == "" {
			return set
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: Sentinel set not ready within 30s: %s", msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func startSentinel(tb testing.TB, bin, primary string, quorum int) string {
	tb.Helper()
	dir := tb.TempDir()
	host, pport := splitAddr(tb, primary)
	for try := 0; ; try++ {
		port, err := freePort()
		if err != nil {
			tb.Fatal(err)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
daemonize no
dir %s
sentinel monitor %s %s %d %d
sentinel down-after-milliseconds %[3]s 1000
sentinel failover-timeout %[3]s 10000
sentinel parallel-syncs %[3]s 1
`, port, dir, SentinelMaster, host, pport, quorum)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			tb.Fatal(err)
		}
		cmd := exec.Command(bin, conf)
		setDeathSignal(cmd)
		log, err := os.Create(filepath.Join(dir, "sentinel.log"))
		if err != nil {
			tb.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			tb.Fatalf("redistest: redis-sentinel: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
		tb.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
			select {
			case <-exited:
				out, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
				if try < 4 {
					goto retry // the port was taken meanwhile
				}
				tb.Fatalf("redistest: redis-sentinel exited: %s", out)
			default:
			}
			if c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(time.Second)); err == nil {
				_, err = c.Do("PING")
				c.Close()
				if err == nil {
					return addr
				}
			}
		}
		tb.Fatalf("redistest: redis-sentinel on %s not ready within 10s", addr)
	retry:
	}
}

func sentinelDo(addr string, cmd string, args ...any) (any, error) {
	c, err := redis.Dial("tcp", addr, redis.DialConnectTimeout(2*time.Second),
		redis.DialReadTimeout(2*time.Second), redis.DialWriteTimeout(2*time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

// ready returns "" once the replicas are in sync with the primary and every
// sentinel sees all of them and its peers, or what is missing.
func (s *SentinelSet) ready() string {
	primary := s.MasterAddr()
	for _, srv := range s.Servers {
		if srv.Addr() == primary {
			continue
		}
		info, err := redis.String(srv.Do("INFO", "replication"))
		if err != nil || !strings.Contains(info, "master_link_status:up") || !strings.Contains(info, "master_port:"+primary[strings.LastIndex(primary, ":")+1:]+"\r") {
			return fmt.Sprintf("replica %s not in sync with %s", srv.Addr(), primary)
		}
	}
	for _, a := range s.Sentinels {
		reps, err := redis.Values(sentinelDo(a, "SENTINEL", "REPLICAS", SentinelMaster))
		if err != nil {
			return fmt.Sprintf("sentinel %s: %v", a, err)
		}
		good := 0
		for _, r := range reps {
			m, _ := redis.StringMap(r, nil)
			if f := m["flags"]; f == "slave" && m["master-link-status"] == "ok" {
				good++
			}
		}
		if good != len(s.Servers)-1 {
			return fmt.Sprintf("sentinel %s sees %d of %d replicas", a, good, len(s.Servers)-1)
		}
		if len(s.Sentinels) > 1 {
			peers, err := redis.Values(sentinelDo(a, "SENTINEL", "SENTINELS", SentinelMaster))
			if err != nil || len(peers) != len(s.Sentinels)-1 {
				return fmt.Sprintf("sentinel %s knows %d of %d peers", a, len(peers), len(s.Sentinels)-1)
			}
		}
	}
	return ""
}

// MasterAddr returns the primary's address as the first sentinel reports it
// (SENTINEL GET-MASTER-ADDR-BY-NAME), or "" if it cannot tell.
func (s *SentinelSet) MasterAddr() string {
	hp, err := redis.Strings(sentinelDo(s.Sentinels[0], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster))
	if err != nil || len(hp) != 2 {
		return ""
	}
	return hp[0] + ":" + hp[1]
}

// Server returns the server at addr, or nil.
func (s *SentinelSet) Server(addr string) *Server {
	for _, srv := range s.Servers {
		if srv.Addr() == addr {
			return srv
		}
	}
	return nil
}

// Failover forces a failover (SENTINEL FAILOVER on the first sentinel, which
// needs no agreement) and waits, at most 30s, until every sentinel reports
// another primary and that server says it is one. It returns the new primary.
// The old primary becomes its replica a few seconds later (when a sentinel next
// reads its INFO).
func (s *SentinelSet) Failover() *Server {
	s.tb.Helper()
	old := s.MasterAddr()
	if _, err := sentinelDo(s.Sentinels[0], "SENTINEL", "FAILOVER", SentinelMaster); err != nil {
		s.tb.Fatalf("redistest: SENTINEL FAILOVER: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		msg := func() string {
			now := s.MasterAddr()
			if now == old || now == "" {
				return "the sentinels still report " + old
			}
			for _, a := range s.Sentinels {
				hp, err := redis.Strings(sentinelDo(a, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster))
				if err != nil || len(hp) != 2 || hp[0]+":"+hp[1] != now {
					return fmt.Sprintf("sentinel %s does not report %s yet", a, now)
				}
			}
			srv := s.Server(now)
			if srv == nil {
				return "unknown primary " + now
			}
			info, err := redis.String(srv.Do("INFO", "replication"))
			if err != nil || !strings.Contains(info, "role:master") {
				return now + " is not a master yet"
			}
			return ""
		}()
		if msg == "" {
			return s.Server(s.MasterAddr())
		}
		if time.Now().After(deadline) {
			s.tb.Fatalf("redistest: failover not done within 30s: %s", msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
