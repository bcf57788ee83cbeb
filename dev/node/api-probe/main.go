// leasehold-api-probe runs in a pod on a real node and calls the API server the way an
// in-cluster client does: at https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
// (the `kubernetes` Service, which kube-proxy carries to the API server), trusting the
// ca.crt and sending the token of the pod's projected service-account volume. It asks
// who it is (a SelfSubjectReview, which every authenticated user may create) and prints
//
//	api-probe: authenticated as <username> via <host>:<port>
//
// On any failure it prints "api-probe: " and the error, and exits 1. After success it
// serves that line over HTTP on :8080 (for port-forward tests) until SIGTERM or
// SIGINT, then exits 0; with -once it exits 0 at once (for exec tests). Standard
// library only, static: packed into an image like the pause binary.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	once := flag.Bool("once", false, "exit after printing instead of serving the line on :8080")
	flag.Parse()
	user, via, err := whoAmI()
	if err != nil {
		fmt.Println("api-probe: " + err.Error())
		os.Exit(1)
	}
	line := fmt.Sprintf("api-probe: authenticated as %s via %s\n", user, via)
	fmt.Print(line)
	if *once {
		return
	}
	// PID 1 of the container: SIGTERM has no default action here, so handle it.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	ln, err := net.Listen("tcp", ":8080")
	if err != nil {
		fmt.Println("api-probe: " + err.Error())
		os.Exit(1)
	}
	go func() {
		_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, line)
		}))
	}()
	<-stop
}

func whoAmI() (string, string, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return "", "", fmt.Errorf("KUBERNETES_SERVICE_HOST/PORT are not set")
	}
	token, err := os.ReadFile(saDir + "/token")
	if err != nil {
		return "", "", err
	}
	caPEM, err := os.ReadFile(saDir + "/ca.crt")
	if err != nil {
		return "", "", err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return "", "", fmt.Errorf("%s/ca.crt holds no PEM certificate", saDir)
	}
	via := net.JoinHostPort(host, port)
	client := &http.Client{
		Timeout:   20 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	body := `{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}`
	req, err := http.NewRequest(http.MethodPost, "https://"+via+"/apis/authentication.k8s.io/v1/selfsubjectreviews", strings.NewReader(body))
	if err != nil {
		return "", "", err
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return "", "", err
	}
	if res.StatusCode != http.StatusCreated && res.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("POST selfsubjectreviews via %s: %s: %s", via, res.Status, raw)
	}
	var review struct {
		Status struct {
			UserInfo struct {
				Username string `json:"username"`
			} `json:"userInfo"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &review); err != nil {
		return "", "", fmt.Errorf("decoding the SelfSubjectReview: %w", err)
	}
	return review.Status.UserInfo.Username, via, nil
}
