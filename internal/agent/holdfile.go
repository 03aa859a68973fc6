package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/capi-inplace/capi-inplace/internal/agent/gate"
	"github.com/capi-inplace/capi-inplace/internal/atomicfile"
)

// HoldFileName is the file, in the agent's state directory, that dates the hold
// of a plan waiting for the etcd cluster (gate.HoldClock).
const HoldFileName = "etcd-quorum-hold.json"

// maxHoldFileSize bounds what LoadHold reads: the record is a hash and a time.
const maxHoldFileSize = 4 << 10

// HoldFile is a gate.HoldRecord in a file beside the journal.
type HoldFile struct {
	Path string
}

var _ gate.HoldRecord = HoldFile{}

type holdRecord struct {
	Plan  string    `json:"plan"`
	Since time.Time `json:"since"`
}

// LoadHold reads the recorded hold. A missing file is no hold; a file that is
// not a record is an error, and the hold counts from now.
func (f HoldFile) LoadHold() (string, time.Time, bool, error) {
	file, err := os.Open(f.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", time.Time{}, false, nil
	}
	if err != nil {
		return "", time.Time{}, false, err
	}
	defer file.Close()
	b, err := io.ReadAll(io.LimitReader(file, maxHoldFileSize+1))
	if err != nil {
		return "", time.Time{}, false, err
	}
	if len(b) > maxHoldFileSize {
		return "", time.Time{}, false, fmt.Errorf("%s is larger than %d bytes", f.Path, maxHoldFileSize)
	}
	var r holdRecord
	if err := json.Unmarshal(b, &r); err != nil || r.Plan == "" || r.Since.IsZero() {
		return "", time.Time{}, false, fmt.Errorf("%s is not a hold record", f.Path)
	}
	return r.Plan, r.Since, true, nil
}

// SaveHold records that plan has been held since since.
func (f HoldFile) SaveHold(plan string, since time.Time) error {
	b, err := json.Marshal(holdRecord{Plan: plan, Since: since.UTC()})
	if err != nil {
		return err
	}
	return atomicfile.Write(f.Path, b, 0o600)
}

// ClearHold removes the record.
func (f HoldFile) ClearHold() error {
	if err := os.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(f.Path))
}
