package experiment

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/sophon-dl/sophon/internal/s3gw"
	"github.com/sophon-dl/sophon/testbed"
	"github.com/sophon-dl/sophon/testbed/bed"
)

// bucketPort is where a storage node's S3 server listens in netns mode.
const bucketPort = "7480"

// bucketURL is s3://BUCKET/PREFIX for the folder data below root
// (root/BUCKET/PREFIX).
func bucketURL(root, data string) (string, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(root, data)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("%w: dataset %s is not inside the S3 root %s", ErrConfig, data, root)
	}
	return "s3://" + filepath.ToSlash(rel), nil
}

// storageData is what storage node i's agent serves: the dataset folder,
// or (Config.S3Root) the dataset's bucket on an S3 server started on the
// node now. It returns the --data value and the command that runs the
// agent: env (the endpoint and credentials of the bucket, through env(1))
// and then bin.
func (x *experiment) storageData(ctx context.Context, b *bed.Bed, i int, dir string) (data, bin string, env []string, err error) {
	if x.cfg.S3Root == "" {
		return x.cfg.Data, x.bins.storage, nil, nil
	}
	listen, err := b.ListenAddr(i, bucketPort)
	if err != nil {
		return "", "", nil, err
	}
	access, secret := "sophon-"+strings.ToLower(rand.Text()[:8]), rand.Text()
	logPath := filepath.Join(dir, fmt.Sprintf("s3gw-%d.log", i+1))
	h := bed.StorageHost(i)
	h.Unconfined = true
	if _, err := b.StartServer(ctx, h, logPath, listen, x.bins.s3gw, s3gw.Args(x.cfg.S3Root, listen, access, secret, "")...); err != nil {
		return "", "", nil, fmt.Errorf("%s's S3 server: %w", testbed.StorageName(i), err)
	}
	env = []string{"env", "AWS_ENDPOINT_URL=http://" + listen, "AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=" + access, "AWS_SECRET_ACCESS_KEY=" + secret}
	return x.res.Dataset.Source, x.bins.storage, env, nil
}
