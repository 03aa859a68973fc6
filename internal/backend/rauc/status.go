package rauc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Slot is one slot of `rauc status --detailed --output-format=json`.
type Slot struct {
	Name       string
	Class      string `json:"class"`
	Device     string `json:"device"`
	BootName   string `json:"bootname"`
	State      string `json:"state"`
	BootStatus string `json:"boot_status"`
	SlotStatus struct {
		Checksum struct {
			SHA256 string `json:"sha256"`
		} `json:"checksum"`
	} `json:"slot_status"`
}

// SystemStatus is RAUC's view of the slots.
type SystemStatus struct {
	Compatible  string `json:"compatible"`
	Booted      string `json:"booted"`
	BootPrimary string `json:"boot_primary"`
	Slots       []Slot `json:"-"`
}

// parseStatus parses `rauc status --detailed --output-format=json`, whose slots
// are a list of one-key objects {"rootfs.0": {...}}.
func parseStatus(out []byte) (SystemStatus, error) {
	var raw struct {
		SystemStatus
		Slots []map[string]Slot `json:"slots"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return SystemStatus{}, fmt.Errorf("parse rauc status: %w", err)
	}
	s := raw.SystemStatus
	for _, m := range raw.Slots {
		for name, sl := range m {
			sl.Name = name
			s.Slots = append(s.Slots, sl)
		}
	}
	sort.Slice(s.Slots, func(i, j int) bool { return s.Slots[i].Name < s.Slots[j].Name })
	return s, nil
}

// Images maps a slot class to the sha256 of the bundle's image for it.
type Images map[string]string

// parseInfo parses `rauc info --output-format=json`.
func parseInfo(out []byte) (Images, error) {
	var raw struct {
		Images []map[string]struct {
			Checksum string `json:"checksum"`
		} `json:"images"`
	}
	if err := json.Unmarshal(out, &raw); err != nil {
		return nil, fmt.Errorf("parse rauc info: %w", err)
	}
	imgs := Images{}
	for _, m := range raw.Images {
		for class, img := range m {
			imgs[class] = img.Checksum
		}
	}
	if len(imgs) == 0 {
		return nil, fmt.Errorf("bundle has no images")
	}
	return imgs, nil
}

// holds reports whether a slot contains the bundle's image for its class.
func (sl Slot) holds(imgs Images) bool {
	want, ok := imgs[sl.Class]
	return ok && want != "" && sl.SlotStatus.Checksum.SHA256 == want
}

// bootable slots are the ones the bootloader chooses between.
func (s SystemStatus) bootable() []Slot {
	var out []Slot
	for _, sl := range s.Slots {
		if sl.BootName != "" {
			out = append(out, sl)
		}
	}
	return out
}

// booted is the running bootable slot, if RAUC knows it.
func (s SystemStatus) booted() (Slot, bool) {
	for _, sl := range s.bootable() {
		if sl.State == "booted" || (s.Booted != "" && sl.BootName == s.Booted) {
			return sl, true
		}
	}
	return Slot{}, false
}

// holder is the bootable slot, other than the booted one, that holds the images.
func (s SystemStatus) holder(imgs Images) (Slot, bool) {
	b, _ := s.booted()
	for _, sl := range s.bootable() {
		if sl.Name != b.Name && sl.holds(imgs) {
			return sl, true
		}
	}
	return Slot{}, false
}

// previous is the bootable slot of the booted slot's class that is not booted:
// in an A/B system, the other one.
func (s SystemStatus) previous() (Slot, bool) {
	b, ok := s.booted()
	if !ok {
		return Slot{}, false
	}
	for _, sl := range s.bootable() {
		if sl.Name != b.Name && sl.Class == b.Class {
			return sl, true
		}
	}
	return Slot{}, false
}

// activateInstalled reads [system] activate-installed from a system.conf;
// RAUC's default is true.
func activateInstalled(conf string) bool {
	section := ""
	sc := bufio.NewScanner(strings.NewReader(conf))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			section = strings.TrimSpace(line[1 : len(line)-1])
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok && section == "system" && strings.TrimSpace(k) == "activate-installed" {
			return strings.TrimSpace(v) != "false"
		}
	}
	return true
}
