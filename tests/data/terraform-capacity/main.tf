provider "aws" {
  region                      = "us-east-1"
  access_key                  = "testing"
  secret_key                  = "testing"
  skip_credentials_validation = true
  skip_metadata_api_check     = true
  skip_requesting_account_id  = true
  default_tags {
    tags = { team = "research", env = "dev", project = "llm", "cost-center" = "cc-42" }
  }
}

resource "aws_ec2_capacity_reservation" "p5" {
  instance_type     = "p5.48xlarge"
  instance_platform = "Linux/UNIX"
  availability_zone = "us-east-1a"
  instance_count    = 2
}

# In an On-Demand Capacity Reservation created in the same apply: reserved.
resource "aws_instance" "reserved" {
  ami           = "ami-0123456789abcdef0"
  instance_type = "p5.48xlarge"
  capacity_reservation_specification {
    capacity_reservation_target {
      capacity_reservation_id = aws_ec2_capacity_reservation.p5.id
    }
  }
}

# "open" alone only allows a matching open reservation: still on-demand.
resource "aws_instance" "open_only" {
  ami           = "ami-0123456789abcdef0"
  instance_type = "g5.12xlarge"
  capacity_reservation_specification {
    capacity_reservation_preference = "open"
  }
}

# A Capacity Block for ML, through a launch template.
resource "aws_launch_template" "block" {
  name          = "p5e-block"
  instance_type = "p5e.48xlarge"
  instance_market_options {
    market_type = "capacity-block"
  }
  capacity_reservation_specification {
    capacity_reservation_target {
      capacity_reservation_id = "cr-0a1b2c3d4e5f67890"
    }
  }
}

resource "aws_eks_node_group" "block" {
  cluster_name    = "train"
  node_group_name = "p5e-block"
  node_role_arn   = "arn:aws:iam::123456789012:role/eks-node"
  subnet_ids      = ["subnet-0123456789abcdef0"]
  capacity_type   = "CAPACITY_BLOCK"
  launch_template {
    id      = aws_launch_template.block.id
    version = aws_launch_template.block.latest_version
  }
  scaling_config {
    desired_size = 2
    max_size     = 2
    min_size     = 0
  }
}

module "gpu" {
  source = "./modules/gpu"
}

# An autoscaling group launching only into the reservation above, from a plain template.
resource "aws_launch_template" "plain" {
  name          = "p5-plain"
  instance_type = "p5.48xlarge"
}

resource "aws_autoscaling_group" "odcr" {
  name               = "p5-odcr"
  availability_zones = ["us-east-1a"]
  min_size           = 0
  max_size           = 2
  desired_capacity   = 2
  launch_template {
    id      = aws_launch_template.plain.id
    version = "$Latest"
  }
  capacity_reservation_specification {
    capacity_reservation_preference = "capacity-reservations-only"
    capacity_reservation_target {
      capacity_reservation_ids = [aws_ec2_capacity_reservation.p5.id]
    }
  }
}
