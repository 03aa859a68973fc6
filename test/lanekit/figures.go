package lanekit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Figures collects a lane's measurements for its figures.md.
type Figures struct {
	// Title heads the table.
	Title string
	mu    sync.Mutex
	rows  [][2]string
}

// Add records one figure.
func (f *Figures) Add(name string, value any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var v string
	switch x := value.(type) {
	case time.Duration:
		v = x.Round(100 * time.Millisecond).String()
	default:
		v = fmt.Sprint(x)
	}
	f.rows = append(f.rows, [2]string{name, v})
}

// Write writes the figures as a Markdown table.
func (f *Figures) Write(path string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "# %s (%s)\n\n| measurement | value |\n| --- | --- |\n", f.Title, time.Now().UTC().Format(time.RFC3339))
	for _, r := range f.rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], r[1])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
