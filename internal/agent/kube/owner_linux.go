package kube

import (
	"os"
	"syscall"
)

func owner(info os.FileInfo) (int, int) {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return -1, -1
}

// chown changes ownership; without root it only succeeds when nothing changes,
// so an unprivileged agent (the simulated host in tests) skips it.
func chown(path string, uid, gid int) error {
	if uid < 0 || os.Geteuid() != 0 {
		return nil
	}
	return os.Chown(path, uid, gid)
}
