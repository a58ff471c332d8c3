// Command render writes the Kubernetes manifests of deploy/k8s, rendered
// from a values file, to standard output:
//
//	go run ./deploy/render --values deploy/k8s/values.yaml > sophon.yaml
//	go run ./deploy/render --values my-values.yaml --certs .certs --part secrets,storage
//
// See docs/deploy.md, "Kubernetes".
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/sophon-dl/sophon/deploy"
)

func main() {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	values := fs.String("values", "", "values `file` (YAML; keys left out take deploy/k8s/values.yaml's)")
	certs := fs.String("certs", "", "`folder` written by make certs: render the Secrets from its files (never ca-key.pem)")
	parts := fs.String("part", "", "comma-separated `parts` to render: "+strings.Join(deploy.Parts, ", ")+" (default: all)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: render [--values FILE] [--certs DIR] [--part PARTS] > manifests.yaml")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			return
		}
		os.Exit(2)
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "render: no arguments expected; see --help")
		os.Exit(2)
	}
	v := deploy.DefaultValues()
	if *values != "" {
		var err error
		if v, err = deploy.LoadValues(*values); err != nil {
			fmt.Fprintln(os.Stderr, "render:", err)
			os.Exit(1)
		}
	}
	opt := deploy.Options{Certs: *certs}
	if *parts != "" {
		opt.Parts = strings.Split(*parts, ",")
	}
	if err := deploy.Render(os.Stdout, v, opt); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}
