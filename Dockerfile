# gpuwarden image: the admission webhook (default command) and the CLI.
# Not built in this repository's CI (no container engine there); see docs/admission.md.
FROM python:3.12-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY engine engine
COPY remediations remediations
COPY policies policies
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.12-slim
COPY --from=build /install /usr/local
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpuwarden"]
CMD ["webhook", "--cert", "/tls/tls.crt", "--key", "/tls/tls.key", "--port", "8443"]
