package scenarios

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// PostgreSQL wire protocol codes the tap reads (protocol 3).
const (
	pgProtocol3    = 3 << 16
	pgProtocol32   = 3<<16 | 2
	pgCancelCode   = 80877102
	pgSSLCode      = 80877103
	pgGSSEncCode   = 80877104
	maxStartupSize = 10000
)

// Wire event kinds: what a replica sent PostgreSQL.
const (
	// wireSession is a new session (a StartupMessage): a dial.
	wireSession = "session"
	// wireStatement is a message that runs SQL: a simple Query, an
	// Execute (of the extended protocol) or a FunctionCall.
	wireStatement = "statement"
	// wirePrepare is a Parse or a Bind: the server plans or binds a
	// statement, which changes nothing yet but is a call all the same.
	wirePrepare = "prepare"
	// wireTerminate is a session's polite end (Terminate).
	wireTerminate = "terminate"
	// wireCancel is a CancelRequest for one of the replica's own backends.
	wireCancel = "cancel"
	// wireOther is every other frontend message (Sync, Describe, the
	// password exchange, ...), counted for the byte totals.
	wireOther = "other"
	// wireOpaque is a connection the tap could not read (an SSLRequest, a
	// malformed startup): nothing can be said about whose it is.
	wireOpaque = "opaque"
)

// wireEvent is one message a client sent through the tap.
type wireEvent struct {
	At time.Time
	// Replica is the sender: its application_name, or for a cancel the
	// replica whose backend it names; "" when unknown.
	Replica string
	Kind    string
	// Type is the frontend message type byte (0 for startup packets).
	Type  byte
	Bytes int
	// SQL starts the text of the statement a Query, Parse, Bind or
	// Execute message is about.
	SQL string
}

// sqlShown is how much of a statement's text an event keeps.
const sqlShown = 60

// tap is a TCP proxy in front of PostgreSQL that reads what goes through
// it, as far as the frontend protocol's framing: which replica (by the
// application_name of its StartupMessage, which pgx takes from $PGAPPNAME)
// sent which message when. It forwards every byte unchanged and before
// reading it, so it delays nothing but its own bookkeeping. Plaintext
// only: an SSLRequest makes the connection opaque.
type tap struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu sync.Mutex
	// events holds everything seen, in order; guarded by mu.
	events []wireEvent
	// backends maps a backend process ID (BackendKeyData) to the replica
	// whose session it serves, for cancel requests; guarded by mu.
	backends map[uint32]string
	// conns holds the open connections, closed by close; guarded by mu.
	conns map[net.Conn]struct{}
	// onEvent, when set, hears of each event as it is recorded, outside
	// mu; set before traffic flows.
	onEvent func(wireEvent)
}

func newTap(target string) (*tap, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failover: tap listen: %w", err)
	}
	t := &tap{target: target, ln: ln, backends: map[uint32]string{}, conns: map[net.Conn]struct{}{}}
	t.wg.Add(1)
	go t.accept()
	return t, nil
}

func (t *tap) addr() string { return t.ln.Addr().String() }

func (t *tap) close() {
	_ = t.ln.Close() // ends the accept loop
	t.mu.Lock()
	for c := range t.conns {
		_ = c.Close() // ends that connection's pumps
	}
	t.mu.Unlock()
	t.wg.Wait()
}

// snapshot returns the events so far.
func (t *tap) snapshot() []wireEvent {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]wireEvent(nil), t.events...)
}

func (t *tap) record(e wireEvent) {
	t.mu.Lock()
	t.events = append(t.events, e)
	hook := t.onEvent
	t.mu.Unlock()
	if hook != nil {
		hook(e)
	}
}

func (t *tap) track(c net.Conn, open bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if open {
		t.conns[c] = struct{}{}
	} else {
		delete(t.conns, c)
	}
}

func (t *tap) accept() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		t.wg.Add(1)
		go t.serve(c)
	}
}

func (t *tap) serve(client net.Conn) {
	defer t.wg.Done()
	server, err := net.Dial("tcp", t.target)
	if err != nil {
		_ = client.Close() // the client sees the refusal as a reset
		return
	}
	t.track(client, true)
	t.track(server, true)
	defer func() {
		_ = client.Close() // both directions are done
		_ = server.Close()
		t.track(client, false)
		t.track(server, false)
	}()
	// replica is learned from the startup packet, before any server
	// reply can name a backend.
	replica := make(chan string, 1)
	var pumps sync.WaitGroup
	pumps.Add(2)
	go func() {
		defer pumps.Done()
		t.frontend(bufio.NewReader(io.TeeReader(client, server)), replica)
		// Keep forwarding whatever follows an unreadable message.
		_, _ = io.Copy(server, client)
		_ = server.(*net.TCPConn).CloseWrite()
	}()
	go func() {
		defer pumps.Done()
		t.backend(bufio.NewReader(io.TeeReader(server, client)), replica)
		_, _ = io.Copy(client, server)
		_ = client.(*net.TCPConn).CloseWrite()
	}()
	pumps.Wait()
}

// frontend reads the client's side: the startup packet, then framed
// messages. It returns at the end of the stream or at anything it cannot
// frame (the caller keeps forwarding).
func (t *tap) frontend(r *bufio.Reader, replica chan<- string) {
	defer close(replica)
	var head [8]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return
	}
	size := binary.BigEndian.Uint32(head[:4])
	code := binary.BigEndian.Uint32(head[4:])
	if size < 8 || size > maxStartupSize {
		t.record(wireEvent{At: time.Now(), Kind: wireOpaque, Bytes: 8})
		return
	}
	body := make([]byte, size-8)
	if _, err := io.ReadFull(r, body); err != nil {
		return
	}
	now := time.Now()
	switch code {
	case pgCancelCode:
		var who string
		if len(body) >= 4 {
			t.mu.Lock()
			who = t.backends[binary.BigEndian.Uint32(body[:4])]
			t.mu.Unlock()
		}
		t.record(wireEvent{At: now, Replica: who, Kind: wireCancel, Bytes: int(size)})
		return
	case pgProtocol3, pgProtocol32:
	default: // pgSSLCode, pgGSSEncCode, or anything else
		t.record(wireEvent{At: now, Kind: wireOpaque, Bytes: int(size)})
		return
	}
	name := startupParam(body, "application_name")
	replica <- name
	t.record(wireEvent{At: now, Replica: name, Kind: wireSession, Bytes: int(size)})
	// The extended protocol names its statements: Parse gives a name its
	// text, Bind binds a named statement, Execute runs what was bound.
	prepared := map[string]string{}
	var bound string
	for {
		typ, n, body, err := frameBody(r, func(typ byte) bool { return typ == 'Q' || typ == 'P' || typ == 'B' })
		if err != nil {
			return
		}
		var sql string
		switch typ {
		case 'Q':
			sql, _, _ = cutNUL(body)
		case 'P':
			if stmt, rest, ok := cutNUL(body); ok {
				sql, _, _ = cutNUL(rest)
				prepared[stmt] = sql
			}
		case 'B':
			if _, rest, ok := cutNUL(body); ok { // the portal, then the statement
				stmt, _, _ := cutNUL(rest)
				bound = prepared[stmt]
			}
			sql = bound
		case 'E':
			sql = bound
		}
		t.record(wireEvent{At: time.Now(), Replica: name, Kind: frontendKind(typ), Type: typ, Bytes: n, SQL: shown(sql)})
	}
}

// backend reads the server's side for BackendKeyData, which names the
// backend process a later cancel request will name.
func (t *tap) backend(r *bufio.Reader, replica <-chan string) {
	name, ok := <-replica
	if !ok {
		return
	}
	for {
		typ, _, body, err := frameBody(r, func(typ byte) bool { return typ == 'K' })
		if err != nil {
			return
		}
		if typ == 'K' && len(body) >= 4 {
			t.mu.Lock()
			t.backends[binary.BigEndian.Uint32(body[:4])] = name
			t.mu.Unlock()
		}
	}
}

// frameBody reads one framed message (type byte, int32 length including
// itself, payload) and returns its type and size, and its payload when
// keep says so.
func frameBody(r *bufio.Reader, keep func(byte) bool) (byte, int, []byte, error) {
	var head [5]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		return 0, 0, nil, err
	}
	size := binary.BigEndian.Uint32(head[1:])
	if size < 4 {
		return 0, 0, nil, fmt.Errorf("failover: tap: message %q of length %d", head[0], size)
	}
	var body []byte
	if keep(head[0]) {
		body = make([]byte, size-4)
		if _, err := io.ReadFull(r, body); err != nil {
			return 0, 0, nil, err
		}
	} else if _, err := r.Discard(int(size - 4)); err != nil {
		return 0, 0, nil, err
	}
	return head[0], int(size) + 1, body, nil
}

// shown is the start of a statement's text, whitespace collapsed.
func shown(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > sqlShown {
		q = q[:sqlShown] + "..."
	}
	return q
}

func frontendKind(typ byte) string {
	switch typ {
	case 'Q', 'E', 'F':
		return wireStatement
	case 'P', 'B':
		return wirePrepare
	case 'X':
		return wireTerminate
	}
	return wireOther
}

// startupParam finds key in a StartupMessage body (after the protocol
// code): NUL-terminated key and value pairs, then a NUL.
func startupParam(body []byte, key string) string {
	for len(body) > 0 {
		k, rest, ok := cutNUL(body)
		if !ok || k == "" {
			return ""
		}
		v, rest, ok := cutNUL(rest)
		if !ok {
			return ""
		}
		if k == key {
			return v
		}
		body = rest
	}
	return ""
}

func cutNUL(b []byte) (string, []byte, bool) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:], true
		}
	}
	return "", nil, false
}
