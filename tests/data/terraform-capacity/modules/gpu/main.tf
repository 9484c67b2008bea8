resource "aws_instance" "trainer" {
  ami           = "ami-0123456789abcdef0"
  instance_type = "g5.12xlarge"
}
