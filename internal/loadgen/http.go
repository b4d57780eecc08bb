package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// httpTransport shares one client, holding at most Conns connections to the server, among the
// workers.
type httpTransport struct {
	cfg    Config
	client *http.Client
	base   string
	policy []byte // the policy name, JSON-quoted
}

func newHTTP(cfg Config) (*httpTransport, error) {
	base := cfg.Target
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		base = "http://" + base
	}
	base = strings.TrimSuffix(base, "/")
	policy, err := json.Marshal(cfg.Policy)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost = cfg.Conns
	tr.MaxIdleConnsPerHost = cfg.Conns
	tr.MaxIdleConns = cfg.Conns
	return &httpTransport{cfg: cfg, client: &http.Client{Transport: tr}, base: base, policy: policy}, nil
}

func (t *httpTransport) close() { t.client.CloseIdleConnections() }

func (t *httpTransport) caller(int) caller {
	c := &httpCaller{t: t, batch: t.cfg.Batch > 1}
	if c.batch {
		c.url = t.base + "/v1/check-many"
	} else {
		c.url = t.base + "/v1/check"
	}
	return c
}

type httpCaller struct {
	t     *httpTransport
	url   string
	batch bool
	body  []byte
	resp  bytes.Buffer
	one   httpDecision
	many  struct {
		Decisions []httpDecision `json:"decisions"`
	}
}

type httpDecision struct {
	Allowed  bool `json:"allowed"`
	FailOpen bool `json:"failOpen"`
}

func (d httpDecision) outcome() outcome {
	var o outcome
	if d.Allowed {
		o.allowed = 1
	}
	if d.FailOpen {
		o.failOpen = 1
	}
	return o
}

func (c *httpCaller) call(ctx context.Context, keys []string) (outcome, error) {
	b := append(c.body[:0], `{"policy":`...)
	b = append(b, c.t.policy...)
	if c.batch {
		b = append(b, `,"keys":[`...)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendQuote(b, k) // bench keys are ASCII, where Go and JSON quoting agree
		}
		b = append(b, ']')
	} else {
		b = append(b, `,"key":`...)
		b = strconv.AppendQuote(b, keys[0])
	}
	b = append(b, `,"cost":`...)
	b = strconv.AppendInt(b, c.t.cfg.Cost, 10)
	b = append(b, '}')
	c.body = b

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(b))
	if err != nil {
		return outcome{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.t.cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.t.cfg.Token)
	}
	resp, err := c.t.client.Do(req)
	if err != nil {
		return outcome{}, err
	}
	c.resp.Reset()
	_, err = c.resp.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return outcome{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return outcome{}, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(c.resp.Bytes()))
	}
	if !c.batch {
		c.one = httpDecision{}
		if err := json.Unmarshal(c.resp.Bytes(), &c.one); err != nil {
			return outcome{}, fmt.Errorf("decoding the answer: %w", err)
		}
		return c.one.outcome(), nil
	}
	// encoding/json decodes into the slice's old elements, keeping fields an answer leaves out.
	c.many.Decisions = c.many.Decisions[:cap(c.many.Decisions)]
	clear(c.many.Decisions)
	c.many.Decisions = c.many.Decisions[:0]
	if err := json.Unmarshal(c.resp.Bytes(), &c.many); err != nil {
		return outcome{}, fmt.Errorf("decoding the answer: %w", err)
	}
	if len(c.many.Decisions) != len(keys) {
		return outcome{}, fmt.Errorf("check-many of %d keys answered %d decisions", len(keys), len(c.many.Decisions))
	}
	var o outcome
	for _, d := range c.many.Decisions {
		o.add(d.outcome())
	}
	return o, nil
}
