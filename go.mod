module github.com/sophon-dl/sophon

go 1.26.8

require (
	github.com/klauspost/compress v1.20.3
	github.com/rs/zerolog v1.35.1
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	golang.org/x/sys v0.29.0 // indirect
)
