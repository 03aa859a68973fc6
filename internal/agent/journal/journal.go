package journal

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
)

// Entry is one journal record.
type Entry struct {
	// Key is the plan hash the entry is about.
	Key string `json:"key,omitempty"`
	// Plan is the plan itself, so the agent can resume without the API server.
	Plan json.RawMessage `json:"plan,omitempty"`
	// State is the state machine's state.
	State json.RawMessage `json:"state,omitempty"`
	// InFlight is the key of the action started and not yet finished.
	InFlight string `json:"inFlight,omitempty"`
	// Runs counts how many times each action (by key) was started for this plan.
	Runs map[string]int `json:"runs,omitempty"`
	// Committed is the last plan this node committed; it survives Reset, so the
	// agent can tell what changed since.
	Committed json.RawMessage `json:"committed,omitempty"`
	// Attempt identifies this attempt at the plan (see NewAttempt): every file the
	// attempt keeps on the host (backups, etcd snapshot) is under its ID, so a
	// retry of the same plan never reuses an earlier attempt's files.
	Attempt string `json:"attempt,omitempty"`
	// CommittedAttempt is the attempt that committed Committed; its files are
	// kept until another attempt commits. It survives Reset.
	CommittedAttempt string `json:"committedAttempt,omitempty"`
	// Seq increases with every save; it orders entries for humans and tests.
	Seq uint64 `json:"seq"`
}

// Reset starts an entry for another plan: run counters start over, and there is
// no attempt until the caller starts one.
func (e *Entry) Reset(key string, plan json.RawMessage) {
	*e = Entry{Key: key, Plan: plan, Seq: e.Seq, Committed: e.Committed, CommittedAttempt: e.CommittedAttempt}
}

// NewAttempt returns the ID of a new attempt at plan key, for an entry at
// sequence seq: the plan hash, the journal sequence (unique while the journal
// lives) and random bytes (unique if the journal is removed and starts over).
func NewAttempt(key string, seq uint64) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", key, seq, hex.EncodeToString(b))
}

// Begin records the intent to run an action.
func (e *Entry) Begin(action string) {
	if e.Runs == nil {
		e.Runs = map[string]int{}
	}
	e.Runs[action]++
	e.InFlight = action
}

// Finish records that the action in flight ended (successfully or not).
func (e *Entry) Finish() { e.InFlight = "" }

// Journal stores the latest Entry.
type Journal interface {
	// Load returns the latest entry; a zero Entry when nothing was saved yet.
	Load() (Entry, error)
	// Save durably replaces the latest entry.
	Save(e Entry) error
}

// ErrCorrupt means the journal file exists but cannot be read as an entry.
var ErrCorrupt = errors.New("journal is corrupt")

// File is a Journal in one file on the host disk.
type File struct {
	path string
	mu   sync.Mutex
}

var _ Journal = &File{}

// NewFile returns a journal in dir/journal.json; dir is created when missing.
func NewFile(dir string) (*File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create journal directory: %w", err)
	}
	return &File{path: filepath.Join(dir, "journal.json")}, nil
}

// Path is the journal file's path.
func (f *File) Path() string { return f.path }

// Load implements Journal.
func (f *File) Load() (Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if errors.Is(err, os.ErrNotExist) {
		return Entry{}, nil
	}
	if err != nil {
		return Entry{}, fmt.Errorf("read journal: %w", err)
	}
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, f.path, err)
	}
	return e, nil
}

// Save implements Journal.
func (f *File) Save(e Entry) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	e.Seq++
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	if err := atomicfile.Write(f.path, b, 0o600); err != nil {
		return fmt.Errorf("save journal: %w", err)
	}
	return nil
}

// Memory is an in-memory Journal for tests. It stores the encoded entry, so what
// is loaded went through the same JSON round trip as a file journal.
type Memory struct {
	mu    sync.Mutex
	data  []byte
	saves int
}

var _ Journal = &Memory{}

// Load implements Journal.
func (m *Memory) Load() (Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return Entry{}, nil
	}
	var e Entry
	if err := json.Unmarshal(m.data, &e); err != nil {
		return Entry{}, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return e, nil
}

// Save implements Journal.
func (m *Memory) Save(e Entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	e.Seq++
	b, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode journal: %w", err)
	}
	m.data = b
	m.saves++
	return nil
}

// Saves returns how many times Save was called.
func (m *Memory) Saves() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves
}
