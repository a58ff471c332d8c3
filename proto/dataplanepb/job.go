package dataplanepb

import (
	"errors"
	"fmt"
)

// JobMetadata is the gRPC metadata key under which a compute agent names
// its training job on every call (Info, Fetch): the storage agent divides
// its CPU budget among the jobs it serves (InfoResponse.share_cpus). All
// ranks and connections of one job send the same name.
const JobMetadata = "sophon-job"

// MaxJobName bounds a job name in bytes.
const MaxJobName = 64

// ErrJobName refuses a job name that is empty, too long or holds a byte
// outside [A-Za-z0-9._:@/-].
var ErrJobName = errors.New("dataplanepb: bad job name")

// CheckJobName checks a job name as both agents accept it.
func CheckJobName(name string) error {
	if name == "" || len(name) > MaxJobName {
		return fmt.Errorf("%w: %q: want 1 to %d bytes", ErrJobName, name, MaxJobName)
	}
	for i := range len(name) {
		c := name[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '@' || c == '/' || c == '-'
		if !ok {
			return fmt.Errorf("%w: %q: byte %q at %d, want [A-Za-z0-9._:@/-]", ErrJobName, name, c, i)
		}
	}
	return nil
}
