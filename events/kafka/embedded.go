package kafka

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Embedded is the in-process Kafka-protocol broker cfgd runs when
// KAFKA__BROKERS is empty. It keeps its log in a data directory so events
// survive a restart, and listens on a fixed loopback address so ordinary
// Kafka tools (kcat, kafka-console-consumer) can inspect it. It requires a
// SASL (SCRAM-SHA-256) login: anyone who can reach the port could otherwise
// produce events. The credentials are generated on first run into
// ClientPropertiesFile in the data directory, a librdkafka properties file
// that kcat reads with -F.
type Embedded struct {
	cluster *kfake.Cluster
	addr    string
	sasl    SASL
	lock    *os.File // held while the broker owns its data directory
}

// lockFile, inside the data directory, is locked by the broker that owns
// it: two brokers writing one log would corrupt it.
const lockFile = "broker.lock"

// lockDataDir takes the data directory for this process, or says which
// kind of process holds it. The lock goes with the process, SIGKILL
// included, so a crash leaves nothing to clean up.
func lockDataDir(dataDir string) (*os.File, error) {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("embedded kafka data directory: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dataDir, lockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka data directory: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("embedded kafka data directory %s is in use by another broker (a `cfgd broker`, or a `cfgd serve` without KAFKA__BROKERS): point this process at it with KAFKA__BROKERS, or give it a data directory of its own", dataDir)
		}
		return nil, fmt.Errorf("embedded kafka data directory %s: lock: %w", dataDir, err)
	}
	return f, nil
}

// ClientPropertiesFile is the name, inside the embedded broker's data
// directory, of the file holding its login.
const ClientPropertiesFile = "client.properties"

// StartEmbedded starts one broker on addr ("host:port"; port 0 picks a free
// one) with its data under dataDir ("" keeps it in memory, for tests, with a
// login generated for this start).
func StartEmbedded(dataDir, addr string) (*Embedded, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka address %q: %w", addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("embedded kafka port %q: %w", portStr, err)
	}
	var lock *os.File
	if dataDir != "" {
		if lock, err = lockDataDir(dataDir); err != nil {
			return nil, err
		}
	}
	unlock := func() {
		if lock != nil {
			_ = lock.Close()
		}
	}
	login, err := embeddedLogin(dataDir)
	if err != nil {
		unlock()
		return nil, err
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.Ports(port),
		kfake.ClusterID("cfgd-embedded"),
		kfake.DefaultNumPartitions(1),
		// kfake always binds 127.0.0.1; honour the configured host instead.
		kfake.ListenFn(func(network, a string) (net.Listener, error) {
			_, p, _ := net.SplitHostPort(a)
			return net.Listen(network, net.JoinHostPort(host, p))
		}),
		// Consumer groups rejoin quickly after a restart.
		kfake.GroupMinSessionTimeout(0),
		kfake.EnableSASL(),
		kfake.Superuser(login.Mechanism, login.User, login.Password),
	}
	if dataDir != "" {
		opts = append(opts, kfake.DataDir(dataDir))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		unlock()
		return nil, fmt.Errorf("start embedded kafka on %s: %w", addr, err)
	}
	addrs := c.ListenAddrs()
	if len(addrs) == 0 {
		c.Close()
		unlock()
		return nil, fmt.Errorf("start embedded kafka on %s: no listener", addr)
	}
	if err := advertiseHandshakeV0(c, addrs[0]); err != nil {
		c.Close()
		unlock()
		return nil, err
	}
	return &Embedded{cluster: c, addr: addrs[0], sasl: login, lock: lock}, nil
}

// Addr is the broker's address for clients.
func (e *Embedded) Addr() string { return e.addr }

// SASL is the login clients need; put it in Config.SASL.
func (e *Embedded) SASL() SASL { return e.sasl }

// Close stops the broker and flushes its data directory.
func (e *Embedded) Close() {
	e.cluster.Close()
	if e.lock != nil {
		// After the flush: the next broker finds the whole log.
		_ = e.lock.Close()
	}
}

// embeddedLogin reads the broker's login from dataDir, creating it on first
// run; without a data directory it makes one up.
func embeddedLogin(dataDir string) (SASL, error) {
	if dataDir == "" {
		return newLogin()
	}
	path := filepath.Join(dataDir, ClientPropertiesFile)
	login, err := readLogin(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return login, err
	}
	if login, err = newLogin(); err != nil {
		return SASL{}, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return SASL{}, fmt.Errorf("embedded kafka login: %w", err)
	}
	body := fmt.Sprintf("# The embedded broker's login, for kcat -F %s and other librdkafka clients.\n"+
		"security.protocol=SASL_PLAINTEXT\nsasl.mechanisms=%s\nsasl.username=%s\nsasl.password=%s\n",
		path, login.Mechanism, login.User, login.Password)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return readLogin(path)
	}
	if err != nil {
		return SASL{}, fmt.Errorf("embedded kafka login: %w", err)
	}
	_, werr := f.WriteString(body)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return SASL{}, fmt.Errorf("embedded kafka login %s: %w", path, err)
	}
	return login, nil
}

func newLogin() (SASL, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return SASL{}, fmt.Errorf("embedded kafka login: %w", err)
	}
	return SASL{Mechanism: SASLScramSHA256, User: "cfgd", Password: hex.EncodeToString(b)}, nil
}

func readLogin(path string) (SASL, error) {
	f, err := os.Open(path)
	if err != nil {
		return SASL{}, fmt.Errorf("embedded kafka login: %w", err)
	}
	defer f.Close()
	var login SASL
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch strings.TrimSpace(k) {
		case "sasl.mechanisms":
			login.Mechanism = strings.TrimSpace(v)
		case "sasl.username":
			login.User = strings.TrimSpace(v)
		case "sasl.password":
			login.Password = strings.TrimSpace(v)
		}
	}
	if err := sc.Err(); err != nil {
		return SASL{}, fmt.Errorf("embedded kafka login %s: %w", path, err)
	}
	if err := login.validate(); err != nil || login.Mechanism == "" {
		return SASL{}, fmt.Errorf("embedded kafka login %s: incomplete (%v); delete it to generate a new one", path, err)
	}
	return login, nil
}

// ReadEmbeddedLogin reads the login a running embedded broker keeps in
// dataDir, for the commands (cfgd worker, cfgd task, cfgd deadletters) that
// talk to a cfgd serve's broker from another process.
func ReadEmbeddedLogin(dataDir string) (SASL, error) {
	return readLogin(filepath.Join(dataDir, ClientPropertiesFile))
}
