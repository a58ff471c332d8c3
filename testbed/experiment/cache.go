package experiment

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/policy"
)

// PolicyLRU is the testbed's baseline row for the node's cache: No-Off
// with every raw fetch through an LRU cache of raw files under the same
// budget (compute-agent --policy lru --cache-policy lru: split 0
// everywhere, and the planner predicts the LRU's hit ratio), what a user
// gets from a local file cache. It needs Config.CacheBytes.
const PolicyLRU = policy.NameLRU

// ParseCacheBytes resolves a cache budget: absolute (cache.ParseSize:
// "64MiB", "2GB", bytes) or a percentage of the dataset's bytes ("25%").
func ParseCacheBytes(s string, datasetBytes int64) (int64, error) {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || !(f > 0) || f > 1000 {
			return 0, fmt.Errorf("%w: cache bytes %q: want a percentage in (0, 1000]", ErrConfig, s)
		}
		return max(1, int64(f/100*float64(datasetBytes))), nil
	}
	n, err := cache.ParseSize(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%w: cache bytes %q: want bytes (64MiB) or a percentage of the dataset (25%%)", ErrConfig, s)
	}
	return n, nil
}

// cacheDirOf is the cache directory of the compute agent writing report.
func cacheDirOf(report string) string { return strings.TrimSuffix(report, ".jsonl") + "-cache" }

// cacheArgs are a compute agent's cache flags in run pr (it writes
// report): with a budget every run has its own fresh cache (nooff's plan
// keeps nothing resident in it; the policies' plans choose), and the LRU
// row runs No-Off through an LRU cache. The directory is emptied first.
func (x *experiment) cacheArgs(pr policyRun, report string) []string {
	if x.res == nil || x.res.CacheBytes <= 0 {
		return nil
	}
	dir := cacheDirOf(report)
	os.RemoveAll(dir)
	args := []string{"--cache-dir", dir, "--cache-bytes", strconv.FormatInt(x.res.CacheBytes, 10)}
	if pr.policy == PolicyLRU {
		args = append(args, "--cache-policy", cache.PolicyLRU)
	}
	return args
}
