package credprovider

import (
	"errors"
	"net"
	"net/url"
	"path"
	"strings"
)

// The kubelet's image matching, as its credential provider documentation describes it:
// a pattern is a host with an optional port and path, no scheme required; the host is
// compared label by label (dot-separated), each label a glob (*.dkr.ecr.*.amazonaws.com);
// the number of labels must be equal; ports must be equal (absent on both, or the same);
// the pattern's path must be a prefix of the image's path.

type hostPath struct {
	labels []string
	port   string
	path   string
}

func split(s string) (hostPath, error) {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "https://"), "http://")
	u, err := url.Parse("https://" + s)
	if err != nil {
		return hostPath{}, err
	}
	if u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return hostPath{}, errors.New("want host[:port][/path]")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		host, port = u.Host, ""
	}
	return hostPath{labels: strings.Split(host, "."), port: port, path: u.Path}, nil
}

func validGlob(p string) error {
	hp, err := split(p)
	if err != nil {
		return err
	}
	for _, l := range hp.labels {
		if _, err := path.Match(l, ""); err != nil {
			return err
		}
	}
	return nil
}

// matches reports whether image (host[:port]/repository, no tag or digest) is covered by
// pattern.
func matches(pattern, image string) bool {
	p, err := split(pattern)
	if err != nil {
		return false
	}
	t, err := split(image)
	if err != nil || p.port != t.port || len(p.labels) != len(t.labels) || !strings.HasPrefix(t.path, p.path) {
		return false
	}
	for i, l := range p.labels {
		if ok, err := path.Match(l, t.labels[i]); err != nil || !ok {
			return false
		}
	}
	return true
}
