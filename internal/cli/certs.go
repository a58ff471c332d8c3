package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/sophon-dl/sophon/internal/tlsconf"
)

const certsUsage = `Usage: %[1]s certs --out DIR [--cluster NAME] [--storage NAMES] [--compute NAMES] [--hosts HOSTS] [--days N]

Makes the certificates of a development cluster in DIR: a CA (ca.pem,
ca-key.pem; ECDSA P-256), one key pair per node (storage-NAME.pem and
storage-NAME-key.pem, compute-NAME.pem and compute-NAME-key.pem) naming the
node as sophon://CLUSTER/ROLE/NAME, and a random gossip key (gossip.key).
Keys are mode 0600. A CA and a gossip key already in DIR are kept, so it can
be run again to add nodes. Real deployments should use their own PKI, with
the same URI SAN in each certificate.

Example:

  %[1]s certs --out .certs --cluster lab --storage s1,s2 --compute c1 \
    --hosts localhost,127.0.0.1,storage1.lab,10.0.0.5 --days 30
  storage-agent --name s1 --cluster lab --tls-cert .certs/storage-s1.pem \
    --tls-key .certs/storage-s1-key.pem --tls-ca .certs/ca.pem \
    --gossip-key-file .certs/gossip.key ...

Flags:
`

// Certs runs the "certs" subcommand of program prog on args, writing to
// out. It returns the exit code: 0, 2 for bad flags, 1 when writing failed.
func Certs(prog string, args []string, out io.Writer) int {
	fs := flag.NewFlagSet(prog+" certs", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprintf(out, certsUsage, prog)
		fs.PrintDefaults()
	}
	var storage, compute, hosts List
	dir := fs.String("out", "", "`folder` for the files; required")
	cluster := fs.String("cluster", tlsconf.DefaultCluster, "cluster `name` written into every certificate")
	fs.Var(&storage, "storage", "storage agents' node `names`, comma-separated")
	fs.Var(&compute, "compute", "compute agents' node `names`, comma-separated")
	fs.Var(&hosts, "hosts", "DNS names and IP `addresses` the certificates are valid for, comma-separated (default localhost,127.0.0.1,::1)")
	days := fs.Int("days", 365, "validity of the node certificates in `days`")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *dir == "" || fs.NArg() > 0 || *days < 1 {
		fmt.Fprintf(out, "%s certs: need --out DIR, --days of at least 1 and no arguments\n", prog)
		return 2
	}
	res, err := tlsconf.WriteDevCerts(tlsconf.DevCerts{
		Dir: *dir, Cluster: *cluster, Storage: storage, Compute: compute, Hosts: hosts,
		Validity: time.Duration(*days) * 24 * time.Hour,
	})
	if err != nil {
		fmt.Fprintf(out, "%s certs: %v\n", prog, err)
		return 1
	}
	kept := map[bool]string{true: " (kept)", false: ""}
	fmt.Fprintf(out, "CA:         %s%s\n", res.CA, kept[res.CAKept])
	for _, g := range []struct {
		role  string
		names []string
		files map[string]tlsconf.Files
	}{{"storage", storage, res.Storage}, {"compute", compute, res.Compute}} {
		for _, n := range g.names {
			fmt.Fprintf(out, "%-11s %s, %s\n", g.role+" "+n+":", g.files[n].Cert, g.files[n].Key)
		}
	}
	fmt.Fprintf(out, "gossip key: %s%s\n", res.GossipKey, kept[res.GossipKeyKept])
	return 0
}
