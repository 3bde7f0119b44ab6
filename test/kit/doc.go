// Package kit holds the helpers Brewlet's test suites share: waiting and asserting
// (Eventually, Must, ExpectDenied, ExpectReason), the operator in process or as a process
// (StartOperator, StartOperatorProcess), the chart (ChartTemplate, ChartObjects), runtimes
// and applications (BuildRuntimes, PushRuntime, PushHello), the CLI (BuildCLI), registries
// and credentials, metrics and service-account clients. Suites import kit; kit imports no
// suite. Components themselves (control planes, nodes, kubelets, registries) are started by
// test/framework.
package kit
