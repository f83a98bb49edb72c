// Builds the CloudEvents conformance tool (cmd/cloudevents) that the tests use
// to replay recorded events against sluice's receiver. A module of its own,
// so its dependencies stay out of sluice's.
module github.com/sluicehq/sluice/test/tools/conformance

go 1.26.8

require github.com/cloudevents/conformance v0.4.1

require (
	github.com/google/go-cmp v0.5.7 // indirect
	github.com/inconshreveable/mousetrap v1.0.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/spf13/cobra v1.3.0 // indirect
	github.com/spf13/pflag v1.0.5 // indirect
	golang.org/x/xerrors v0.0.0-20200804184101-5ec99f83aff1 // indirect
	gopkg.in/yaml.v2 v2.4.0 // indirect
)
