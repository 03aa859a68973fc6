package simhost

import "github.com/capi-inplace/capi-inplace/internal/backend"

func cmd(name string, args ...string) backend.Command { return backend.Command{Name: name, Args: args} }
