package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/sluice-dev/sluice/limiter/client"
)

// An API key may have 2 requests in flight (policy llm/inflight): each
// takes a slot, and gives it back when it ends.
func ExampleClient_Acquire() {
	ctx := context.Background()
	// limiterURL is a limiter's HTTP address, such as http://127.0.0.1:8080.
	c, err := client.New(limiterURL, client.Options{})
	if err != nil {
		panic(err)
	}
	key := client.Entry{Key: "api_key", Value: "example-acquire"}
	first, _ := c.Acquire(ctx, "llm", key)
	second, _ := c.Acquire(ctx, "llm", key)
	third, _ := c.Acquire(ctx, "llm", key)
	fmt.Println(first.Allowed, second.Allowed, third.Allowed, third.Header.Get("RateLimit-Policy"))

	// The first request ends: its slot is free again.
	endings, _ := first.Lease.Release(ctx)
	fmt.Println(endings[0].Policy, endings[0].Outcome)
	again, _ := c.Acquire(ctx, "llm", key)
	fmt.Println(again.Allowed)
	// Output:
	// true true false "llm/inflight";q=2;qu="concurrent-requests"
	// llm/inflight released
	// true
}

// A request reserves its estimate of tokens (policy llm/tokens, 1000 an
// hour), and settles at what it used when it ends.
func ExampleClient_Reserve() {
	ctx := context.Background()
	c, err := client.New(limiterURL, client.Options{})
	if err != nil {
		panic(err)
	}
	key, model := client.Entry{Key: "api_key", Value: "example-reserve"}, client.Entry{Key: "model", Value: "m1"}
	d, _ := c.Reserve(ctx, "llm", 800, key, model)
	fmt.Println(d.Allowed)
	// 800 reserved: 300 more don't fit.
	more, _ := c.Reserve(ctx, "llm", 300, key, model)
	fmt.Println(more.Allowed)

	// The response used 250 tokens: 550 come back.
	endings, _ := d.Lease.Settle(ctx, 250)
	for _, e := range endings {
		fmt.Println(e.Policy, e.Outcome, e.Held, e.Remaining)
	}
	// Output:
	// true
	// false
	// llm/inflight released 1 2
	// llm/tokens settled 800 750
}

// The middleware checks each request, answers 429 with the limiter's
// headers, and ends the request's lease when the handler returns,
// settled at the cost the handler reports.
func ExampleClient_Middleware() {
	c, err := client.New(limiterURL, client.Options{})
	if err != nil {
		panic(err)
	}
	describe := func(r *http.Request) (client.Request, bool) {
		return client.Request{Domain: "llm", Descriptors: []client.Descriptor{{
			Entries: []client.Entry{{Key: "api_key", Value: r.Header.Get("X-Api-Key")}, {Key: "model", Value: "m1"}},
			Cost:    500, // the request's max_tokens
		}}}, true
	}
	completion := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client.SetCost(r.Context(), 120) // the tokens the response used
		fmt.Fprintln(w, "a completion")
	})
	srv := httptest.NewServer(c.Middleware(describe, nil)(completion))
	defer srv.Close()

	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
		req.Header.Set("X-Api-Key", "example-middleware")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, resp.Header.Get("X-RateLimit-Remaining"))
	}
	// Output:
	// 200 1
	// 200 1
	// 200 1
}
