package bootc

import (
	"encoding/json"
	"fmt"
)

// Host is the part of `bootc status --json` this backend reads.
type Host struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Status     struct {
		Staged         *Entry `json:"staged"`
		Booted         *Entry `json:"booted"`
		Rollback       *Entry `json:"rollback"`
		RollbackQueued bool   `json:"rollbackQueued"`
	} `json:"status"`
}

// Entry is one boot entry of the host.
type Entry struct {
	Image *struct {
		Image struct {
			Image     string `json:"image"`
			Transport string `json:"transport"`
		} `json:"image"`
		Version     string `json:"version"`
		ImageDigest string `json:"imageDigest"`
	} `json:"image"`
}

func (e *Entry) digest() string {
	if e == nil || e.Image == nil {
		return ""
	}
	return e.Image.ImageDigest
}

func (e *Entry) ref() string {
	if e == nil || e.Image == nil {
		return ""
	}
	return e.Image.Image.Image
}

func parseHost(out []byte) (Host, error) {
	var h Host
	if err := json.Unmarshal(out, &h); err != nil {
		return h, fmt.Errorf("parse bootc status: %w", err)
	}
	if h.Kind != "BootcHost" {
		return h, fmt.Errorf("parse bootc status: kind %q is not BootcHost", h.Kind)
	}
	return h, nil
}

// nextBoot is the digest of the image that boots next.
func (h Host) nextBoot() string {
	switch {
	case h.Status.Staged != nil:
		return h.Status.Staged.digest()
	case h.Status.RollbackQueued:
		return h.Status.Rollback.digest()
	default:
		return h.Status.Booted.digest()
	}
}

// rollbackStep decides one step of Rollback: done when the image that ran
// before the artifact boots next; otherwise one `bootc rollback` moves toward
// it (it discards a staged image and toggles the queued rollback).
func rollbackStep(h Host, digest string) (done bool, err error) {
	booted := h.Status.Booted.digest()
	if booted != digest {
		if h.Status.Staged != nil && h.Status.Staged.digest() != digest {
			return true, nil // someone else's staged update: not this rollback's business
		}
		return h.nextBoot() == booted, nil
	}
	target := h.Status.Rollback.digest()
	if target == "" {
		return false, fmt.Errorf("booted image %s has no rollback image", digest)
	}
	return h.nextBoot() == target, nil
}
