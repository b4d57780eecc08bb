module github.com/sluicehq/sluice/bench

go 1.26.0

require (
	github.com/sethvargo/go-limiter v0.7.1
	github.com/sluicehq/sluice v0.0.0
	golang.org/x/time v0.16.0
)

replace github.com/sluicehq/sluice => ../
