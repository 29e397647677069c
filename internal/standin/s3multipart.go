package standin

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// s3Upload is a multipart upload in progress: its object's name
// ("bucket/key") and the parts uploaded, by number.
type s3Upload struct {
	name  string
	parts map[int][]byte
}

// multipart answers CreateMultipartUpload (POST ?uploads), UploadPart
// (PUT ?partNumber=N&uploadId=ID, whose body may come aws-chunked with a
// checksum trailer, already decoded in body) and CompleteMultipartUpload
// (POST ?uploadId=ID, the parts' list in XML), on r's path
// ("/bucket/key"); false for other requests. Parts are stored whole, the
// object is their concatenation in the order the list names them.
func (s *S3Server) multipart(w http.ResponseWriter, r *http.Request, line string, body []byte) bool {
	q := r.URL.Query()
	name := strings.TrimPrefix(r.URL.Path, "/")
	bucket, _, _ := strings.Cut(name, "/")
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.buckets[bucket]; !ok {
		return false
	}
	switch {
	case r.Method == http.MethodPost && q.Has("uploads"):
		s.nextUpload++
		id := fmt.Sprintf("standin-upload-%d", s.nextUpload)
		if s.uploads == nil {
			s.uploads = map[string]*s3Upload{}
		}
		s.uploads[id] = &s3Upload{name: name, parts: map[int][]byte{}}
		s.requests = append(s.requests, line+" CreateMultipartUpload")
		writeXML(w, http.StatusOK, struct {
			XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
			Xmlns    string   `xml:"xmlns,attr"`
			Bucket   string
			Key      string
			UploadID string `xml:"UploadId"`
		}{Xmlns: s3Namespace, Bucket: bucket, Key: strings.TrimPrefix(name, bucket+"/"), UploadID: id})
	case r.Method == http.MethodPut && q.Has("partNumber") && q.Has("uploadId"):
		up, ok := s.uploads[q.Get("uploadId")]
		n, err := strconv.Atoi(q.Get("partNumber"))
		if !ok || up.name != name || err != nil || n < 1 || n > 10000 {
			s.requests = append(s.requests, "404 "+line+" NoSuchUpload")
			s3Error(w, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.")
			return true
		}
		up.parts[n] = body
		s.requests = append(s.requests, fmt.Sprintf("%s UploadPart %d %d bytes payload=%s", line, n, len(body), payloadForm(r)))
		w.Header().Set("ETag", `"`+hexMD5(body)+`"`)
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost && q.Has("uploadId"):
		s.complete(w, q.Get("uploadId"), name, line, body)
	default:
		return false
	}
	return true
}

// complete answers CompleteMultipartUpload; s.mu is held.
func (s *S3Server) complete(w http.ResponseWriter, id, name, line string, body []byte) {
	var list struct {
		Parts []struct {
			PartNumber int
		} `xml:"Part"`
	}
	up, ok := s.uploads[id]
	if !ok || up.name != name {
		s.requests = append(s.requests, "404 "+line+" NoSuchUpload")
		s3Error(w, http.StatusNotFound, "NoSuchUpload", "The specified upload does not exist.")
		return
	}
	if err := xml.Unmarshal(body, &list); err != nil || len(list.Parts) == 0 {
		s.requests = append(s.requests, "400 "+line+" MalformedXML")
		s3Error(w, http.StatusBadRequest, "MalformedXML", "The XML you provided was not well-formed.")
		return
	}
	var obj bytes.Buffer
	for _, p := range list.Parts {
		part, ok := up.parts[p.PartNumber]
		if !ok {
			s.requests = append(s.requests, "400 "+line+" InvalidPart")
			s3Error(w, http.StatusBadRequest, "InvalidPart", "One or more of the specified parts could not be found.")
			return
		}
		obj.Write(part)
	}
	delete(s.uploads, id)
	s.objects[name] = obj.Bytes()
	s.requests = append(s.requests, fmt.Sprintf("%s CompleteMultipartUpload %d parts %d bytes", line, len(list.Parts), obj.Len()))
	bucket, key, _ := strings.Cut(name, "/")
	writeXML(w, http.StatusOK, struct {
		XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
		Xmlns   string   `xml:"xmlns,attr"`
		Bucket  string
		Key     string
		ETag    string
	}{Xmlns: s3Namespace, Bucket: bucket, Key: key, ETag: `"` + hexMD5(obj.Bytes()) + `-` + strconv.Itoa(len(list.Parts)) + `"`})
}

// payloadForm is how r's body was signed, as Requests shows it: sha256,
// UNSIGNED-PAYLOAD, or STREAMING-UNSIGNED-PAYLOAD-TRAILER and its
// trailer.
func payloadForm(r *http.Request) string {
	switch p := r.Header.Get("X-Amz-Content-Sha256"); p {
	case "UNSIGNED-PAYLOAD":
		return p
	case streamingUnsignedTrailer:
		return p + " trailer=" + strings.ToLower(r.Header.Get("X-Amz-Trailer"))
	}
	return "sha256"
}
