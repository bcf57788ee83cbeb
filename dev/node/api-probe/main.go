// leasehold-api-probe runs in a pod on a real node and calls the API server the way an
// in-cluster client does: at https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
// (the `kubernetes` Service, which kube-proxy carries to the API server), trusting the
// ca.crt and sending the token of the pod's projected service-account volume. It asks
// who it is (a SelfSubjectReview, which every authenticated user may create) and prints
//
//	api-probe: authenticated as <username> via <host>:<port>
//
// then exits 0; on any failure it prints "api-probe: " and the error, and exits 1.
// Standard library only, static: packed into an image like the pause binary.
package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	user, via, err := whoAmI()
	if err != nil {
		fmt.Println("api-probe: " + err.Error())
		os.Exit(1)
	}
	fmt.Printf("api-probe: authenticated as %s via %s\n", user, via)
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
